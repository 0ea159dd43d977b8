import { spawn } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { projectRoot, runtimeBinary, watch, type RuntimeName } from "../support/server-process.ts";

// Importing a library entry reads no env, opens no socket, starts no process: each entry imported
// in a fresh process on each runtime (fixtures/import-probe.ts), with the environment watched,
// whose process then ends by itself. Deno runs it with no permission but to read files, so an env
// read, a socket or a child fails the import there; a control module shows the probe catches them.

// The package's entries, and the runner's wiring, which its factory loads on demand.
const ENTRIES = ["index", "album", "model-runner", "config", "node"].map((name) => `src/library/${name}.ts`).concat("src/model-runner.ts");
const RUNTIMES: RuntimeName[] = ["node", "bun", "deno"];
const PROBE = join(projectRoot, "test", "library", "fixtures", "import-probe.ts");

type Seen = { reads: string[]; handles: string[] };

function probe(runtime: RuntimeName, module: string) {
  const runtimeArgs = runtime === "deno" ? ["run", "--no-prompt", "--allow-read"] : runtime === "bun" ? ["run"] : [];
  const child = spawn(runtimeBinary(runtime), [...runtimeArgs, PROBE, pathToFileURL(module).href], { cwd: projectRoot, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } });
  const process_ = watch(child);
  const seen = (): Seen | undefined => {
    const line = process_.output().split("\n").find((l) => l.startsWith('{"reads"'));
    return line ? JSON.parse(line) : undefined;
  };
  return { ...process_, seen };
}

describe("importing a library entry", () => {
  for (const runtime of RUNTIMES) {
    for (const entry of ENTRIES) {
      it(`${entry} on ${runtime}: reads no env, leaves nothing running, and the process ends by itself`, async () => {
        const run = probe(runtime, join(projectRoot, entry));
        const how = await run.exited;
        expect(how, run.output()).toBe(0);
        expect(run.seen()).toEqual({ reads: [], handles: [] });
      });
    }
  }

  it("the probe catches a module that reads the env and listens as it is imported (Node)", async () => {
    const run = probe("node", join(projectRoot, "test", "library", "fixtures", "opens-things.ts"));
    try {
      await run.waitForOutput(/"reads"/);
      expect(run.seen()!.reads).toContain("HOME");
      expect(run.seen()!.handles).toContain("TCPServerWrap");
    } finally {
      await run.stop(1_000);
    }
  });

  it("Deno refuses such a module its env read", async () => {
    const run = probe("deno", join(projectRoot, "test", "library", "fixtures", "opens-things.ts"));
    expect(await run.exited).not.toBe(0);
    expect(run.output()).toMatch(/NotCapable|Requires env access/);
  });
});

import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { startRunnerService, startStack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { projectRoot, runtimeBinary, type ServerProcess } from "../support/server-process.ts";
import type { Registry } from "../support/registry.ts";

// `npm run bundle`'s server for Node (dist/node/): it pulls (the hashing workers copied beside it),
// serves the page (its assets copied too) and a completion, and holds less memory idle than the
// same server from src/index.ts, started the same way in the same run.

const ENTRY = "dist/node/index.js";

beforeAll(() => {
  const built = spawnSync(runtimeBinary("node"), ["scripts/bundle.ts"], { cwd: projectRoot, encoding: "utf8" });
  expect(built.status, built.stderr).toBe(0);
}, 120_000);

const rssMiB = async (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(await readFile(`/proc/${pid}/status`, "utf8"))![1]) / 1024;

async function idleRss(entry?: string): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), "llamadock-bundle-"));
  let server: ServerProcess | undefined;
  try {
    server = await startRunnerService("node", dir, { host: "127.0.0.1:9" } as Registry, {}, entry);
    const url = /model runner service listening on (http:\/\/[\d.]+:\d+)/.exec(server.output())![1]!;
    expect((await ask({ url }, "GET", "/models")).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    return await rssMiB(server.pid);
  } finally {
    await server?.stop(5_000);
    await rm(dir, { recursive: true, force: true });
  }
}

describe("the Node bundle", () => {
  it("pulls, serves the page and a completion", async () => {
    const stack = await startStack({ runtime: "node", models: ["ai/tiny"], entry: ENTRY });
    try {
      const page = await ask({ url: stack.url }, "GET", "/", undefined, { accept: "text/html" });
      expect(page.status).toBe(200);
      const completion = await ask({ url: stack.url }, "POST", "/engines/llama.cpp/v1/completions", { model: "ai/tiny", prompt: "hi", max_tokens: 2 });
      expect(completion.status).toBe(200);
      expect(completion.json().choices).toHaveLength(1);
    } finally {
      await stack.stop();
    }
  }, 120_000);

  it("holds less memory idle than the server from src/index.ts", async () => {
    const fromSource = await idleRss();
    const bundled = await idleRss(ENTRY);
    console.log(`idle model runner under Node: ${fromSource.toFixed(1)} MiB from src/index.ts, ${bundled.toFixed(1)} MiB bundled`);
    expect(bundled).toBeLessThan(fromSource);
  }, 120_000);
});

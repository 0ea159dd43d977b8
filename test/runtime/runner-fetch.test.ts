import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { commandLine, denoPermissions, projectRoot, runtimeBinary } from "../support/server-process.ts";

// Each runtime's runner fetch fails the body's read when the call's signal aborts after the answer's
// headers came (a runner that died or hung mid-answer, a client that left): forward.ts reads a whole
// answer without racing it against the signal, on the strength of this.

const script = (runtime: "bun" | "node" | "deno") =>
  commandLine({ runtime, entry: "test/support/runner-fetch-abort.ts", runtimeArgs: runtime === "deno" ? denoPermissions(["--allow-read", "--allow-write"]) : [] });

describe.each(["bun", "node", "deno"] as const)("the runner fetch under %s", (runtime) => {
  it("fails a body being read with the signal's reason when the call is aborted, whether it keeps its connection or closes it", async () => {
    const child = spawn(runtimeBinary(runtime), script(runtime), { cwd: projectRoot, stdio: ["ignore", "pipe", "inherit"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    const [code] = await once(child, "close");
    expect(code).toBe(0);
    const aborted = { status: 200, outcome: "rejected: the runner died" };
    expect(JSON.parse(output.trim())).toEqual({ kept: aborted, closing: aborted });
  }, 30_000);
});

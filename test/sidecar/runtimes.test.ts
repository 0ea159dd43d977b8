import { spawn, type ChildProcessByStdio } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, isGone, sidecarWorld, type SidecarWorld } from "./harness.ts";

// The supervisor under each runtime: a small script (fixtures/supervise.ts) runs it as a program would.

const BIN = join(import.meta.dirname, "../../node_modules/.bin");
const SCRIPT = join(import.meta.dirname, "fixtures/supervise.ts");
const SPAWN_FAIL = join(import.meta.dirname, "fixtures/spawn-fail.ts");
const DENO_PERMISSIONS = ["--allow-read", "--allow-write", "--allow-run", "--allow-env", "--allow-net"];
const COMMANDS: Record<string, string[]> = {
  bun: [join(BIN, "bun")],
  deno: [join(BIN, "deno"), "run", ...DENO_PERMISSIONS],
  node: [join(BIN, "node")],
};

type Script = ChildProcessByStdio<null, Readable, Readable>;
type Event = { event: string; [key: string]: unknown };

let world: SidecarWorld;
beforeAll(async () => {
  world = await sidecarWorld();
});
afterAll(async () => world.remove());

/** Runs the file `script` under `runtime` to its end: its exit code and output. */
function runToEnd(runtime: string, script: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const [command, ...args] = COMMANDS[runtime]!;
  const child = spawn(command!, [...args, script], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => (stdout += chunk));
  child.stderr.on("data", (chunk) => (stderr += chunk));
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}

function run(runtime: string, mode: "roundtrip" | "hold", name: string): { script: Script; events: AsyncIterator<string>; stderr: () => string } {
  const [command, ...args] = COMMANDS[runtime]!;
  const env = { ...process.env, MODEL_PATH: world.modelPath, RUN_DIR: join(world.runDir, name), LOG_DIR: world.logDir };
  const script = spawn(command!, [...args, SCRIPT, mode], { env, stdio: ["ignore", "pipe", "pipe"] });
  let err = "";
  script.stderr.on("data", (chunk) => (err += chunk));
  const events = createInterface({ input: script.stdout })[Symbol.asyncIterator]();
  return { script, events, stderr: () => err };
}

async function next(events: AsyncIterator<string>, stderr: () => string): Promise<Event> {
  const line = await events.next();
  if (line.done) throw new Error(`the script ended early: ${stderr()}`);
  return JSON.parse(line.value) as Event;
}

describe.each(Object.keys(COMMANDS))("supervisor under %s", (runtime) => {
  it("starts a runner, reaches ready, stops it, removes its socket", async () => {
    const { script, events, stderr } = run(runtime, "roundtrip", `${runtime}-rt`);
    const ready = await next(events, stderr);
    expect(ready).toMatchObject({ event: "ready", runtime, state: "ready", model: "probe", version: world.binary.version });
    expect(await next(events, stderr)).toEqual({ event: "stopped", state: "stopped", socketLeft: false });
    const [code] = await new Promise<[number | null]>((resolve) => script.once("close", (c) => resolve([c])));
    expect(code).toBe(0);
    expect(isGone(ready.pid as number)).toBe(true);
  });

  it("leaves no llama-server behind when it is killed with SIGKILL", async () => {
    const { script, events, stderr } = run(runtime, "hold", `${runtime}-hold`);
    const ready = await next(events, stderr);
    const pid = ready.pid as number;
    expect(isGone(pid)).toBe(false);
    script.kill("SIGKILL");
    expect(await eventually(() => isGone(pid))).toBe(true);
  });

  it("B1: a program that cannot be started rejects spawn, and nothing else rejects unhandled", async () => {
    const { code, stdout, stderr } = await runToEnd(runtime, SPAWN_FAIL, { NOT_EXECUTABLE: world.modelPath });
    expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    const { errors } = JSON.parse(stdout) as { errors: string[] };
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatch(/ENOENT|No such file/);
    expect(errors[1]).toMatch(/EACCES|Permission denied/);
  });
});

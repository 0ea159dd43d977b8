import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createSlotFolder } from "../../src/slot-cache/folder.ts";
import { cacheKey, withSlotCache } from "../../src/slot-cache/runner.ts";
import type { RunnerProcess, RunnerSpec } from "../../src/scheduler/types.ts";

// A save that does not end in time is dropped and the runner stops anyway. The runner here is a
// stand-in whose slot save never answers (what a real llama-server does while the slot is busy: it
// defers the save); the real binary's saves and restores are in test/inference/slot-cache.test.ts.

let dir: string;
beforeEach(async () => void (dir = await mkdtemp(join(tmpdir(), "llamadock-slot-runner-"))));
afterEach(async () => rm(dir, { recursive: true, force: true }));

const spec: RunnerSpec = { name: "m-completion-1", alias: "ai/m:latest", modelPath: "/store/blobs/sha256/abc", mode: "completion", parallel: 1, contextSize: 4096 };

/** A runner whose one slot holds a prompt, and whose save waits until its request is called off. */
function stuckRunner() {
  const calls: string[] = [];
  const files: string[] = [];
  let stopped = false;
  const process: RunnerProcess = {
    fetch: (async (url: string, init: RequestInit = {}) => {
      calls.push(`${init.method ?? "GET"} ${new URL(url).pathname}${new URL(url).search}`);
      if (typeof init.body === "string") files.push((JSON.parse(init.body) as { filename: string }).filename);
      if (url.endsWith("/slots")) return Response.json([{ id: 0, n_prompt_tokens: 50 }]);
      return new Promise((_, reject) => init.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
    }) as typeof fetch,
    exited: new Promise(() => {}),
    running: () => !stopped,
    stop: async () => void (stopped = true),
    kill: async () => void (stopped = true),
  };
  return { process, calls, files, stopped: () => stopped };
}

describe("a runner's saves", () => {
  it("are dropped when they do not end in time, and the runner stops", async () => {
    const runner = stuckRunner();
    const lines: string[] = [];
    const start = withSlotCache(async () => runner.process, {
      folder: createSlotFolder(dir, 1 << 20),
      engine: async () => "v",
      saveWithinMs: () => 50,
      log: (line) => lines.push(line),
    });
    const started = await start(spec);
    await started.stop();
    expect(runner.stopped()).toBe(true);
    expect(runner.calls).toEqual(["GET /slots", "POST /slots/0?action=save"]);
    expect(lines).toEqual([expect.stringMatching(/^slot cache: m-completion-1: slot 0 not saved \(.*\)$/)]);
    expect((await readdir(dir)).filter((n) => n.endsWith(".bin") || n.endsWith(".json"))).toEqual([]);
  });

  it("park a slot that holds an agent session under its session's name, dropped alike when not done in time", async () => {
    const runner = stuckRunner();
    const lines: string[] = [];
    const start = withSlotCache(async () => runner.process, {
      folder: createSlotFolder(dir, 1 << 20),
      engine: async () => "v",
      saveWithinMs: () => 50,
      parking: true,
      log: (line) => lines.push(line),
    });
    const started = await start(spec);
    await started.stop(new Map([[0, "alice\u0000s"]]));
    expect(runner.stopped()).toBe(true);
    expect(runner.calls).toEqual(["GET /slots", "POST /slots/0?action=save"]);
    expect(runner.files).toEqual([expect.stringMatching(/^[0-9a-f]{32}-p[0-9a-f]{32}\.[0-9a-f]{8}\.part$/)]);
    expect(lines).toEqual([expect.stringMatching(/^slot cache: m-completion-1: slot 0 not parked \(.*\): its session processes its conversation again$/)]);
    expect((await readdir(dir)).filter((n) => n.endsWith(".bin") || n.endsWith(".json"))).toEqual([]);
  });

  it("are not made at all when no time is left (a SIGTERM past its grace)", async () => {
    const runner = stuckRunner();
    const start = withSlotCache(async () => runner.process, { folder: createSlotFolder(dir, 1 << 20), engine: async () => "v", saveWithinMs: () => 0 });
    await (await start(spec)).stop();
    expect(runner.stopped()).toBe(true);
    expect(runner.calls).toEqual([]);
  });

  it("a restore that does not end in time is given up, the entry kept, and the runner serves", async () => {
    const folder = createSlotFolder(dir, 1 << 20);
    // A sound entry for this runner, as a save would leave it.
    const saver = stuckRunner();
    const key = cacheKey(spec, "v");
    const file = folder.saving(key, 0);
    await writeFile(join(dir, file), new Uint8Array(100).fill(7));
    await folder.commit(file, key, 0, 10);
    const lines: string[] = [];
    const start = withSlotCache(async () => saver.process, { folder, engine: async () => "v", saveWithinMs: () => 0, restoreWithinMs: 50, log: (line) => lines.push(line) });
    const started = await start(spec);
    expect(saver.calls).toEqual(["POST /slots/0?action=restore"]);
    expect(lines).toEqual(["slot cache: m-completion-1: restores not done within 50 ms: it serves without them"]);
    expect(await folder.checkout(key, 0)).toMatch(/-0\.bin$/);
    await started.stop();
  });
});

import { readdir, readFile, rm, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./harness.ts";
import { ask } from "../support/http.ts";

// Prompt caches across eviction and restart, end to end: the server under Bun, tiny models (a
// trained context of 4096 tokens, one token per byte) from a real registry, real llama-server
// runners saving and restoring their slots. What shows the cache was reused is llama-server's own
// count of the prompt tokens it processed (`timings.prompt_n`).

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    models: [],
    shaped: { "ai/talk": { context: 4096, seed: 5 }, "ai/other": { context: 4096, seed: 6 } },
    env: { INFERENCE_SLOTS: "1", INFERENCE_MAX_RUNNERS: "1" },
  });
});
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
const folder = () => join(stack.dir, "models", "slot-cache");
const entries = async () => (await readdir(folder()).catch(() => [] as string[])).filter((n) => n.endsWith(".bin")).sort();
/** A conversation: a long start, then turns appended to it. */
const START = Array.from({ length: 40 }, (_, i) => `line ${i}: the quick brown fox jumps over the lazy dog.`).join("\n");
/** The entry of a model's runner: its metadata names the model's blob, which its runner log's command line gives. */
async function entryOf(model: string): Promise<string | undefined> {
  const blob = new RegExp(`--model \\S+/([0-9a-f]{64}) --alias ${model}:latest`).exec(await stack.runnerLogs())?.[1];
  for (const name of await entries()) {
    const meta = JSON.parse(await readFile(join(folder(), name.replace(/\.bin$/, ".json")), "utf8")) as { key: { model: string } };
    if (meta.key.model === blob) return name;
  }
  return undefined;
}
const removeEntry = async (name: string) => {
  for (const ext of [".bin", ".json"]) await rm(join(folder(), name.replace(/\.bin$/, ext)));
};
/** The tokens an entry holds, as its metadata says. */
const tokensIn = async (entry: string) => (JSON.parse(await readFile(join(folder(), entry.replace(/\.bin$/, ".json")), "utf8")) as { tokens: number }).tokens;
type Timings = { prompt_n: number; cache_n: number };
async function complete(model: string, prompt: string): Promise<Timings> {
  const answer = await ask(tcp(), "POST", "/v1/completions", { model, prompt, max_tokens: 2, temperature: 0 });
  expect(answer.status, answer.body).toBe(200);
  return answer.json().timings as Timings;
}
const unloadAll = async () => expect((await ask(tcp(), "POST", "/engines/unload", { all: true })).json()).toMatchObject({ unloaded_runners: expect.any(Number) });

describe("prompt caches across eviction and restart", () => {
  it("a conversation resumed after its runner was unloaded processes only its new tokens", async () => {
    const cold = await complete("ai/talk", START);
    expect(cold.prompt_n).toBeGreaterThan(1500);
    await unloadAll();
    expect(await entries()).toHaveLength(1);
    const resumed = await complete("ai/talk", `${START}\nline 120: and then`);
    expect(resumed.prompt_n).toBeLessThan(30);
    expect(resumed.cache_n).toBeGreaterThan(1500);
  });

  it("survives an eviction by another model, and a restart (SIGTERM saves)", async () => {
    // One runner at most: loading ai/other evicts ai/talk, which saves its slot first (longer now).
    const [entry] = await entries();
    const before = await tokensIn(entry!);
    await complete("ai/other", "something else entirely");
    expect(await entries()).toEqual([entry]);
    expect(await tokensIn(entry!)).toBeGreaterThan(before);
    const afterEviction = await complete("ai/talk", `${START}\nline 120: and then\nline 121: more`);
    expect(afterEviction.prompt_n).toBeLessThan(30);
    await stack.restart();
    const afterRestart = await complete("ai/talk", `${START}\nline 120: and then\nline 121: more\nline 122: again`);
    expect(afterRestart.prompt_n).toBeLessThan(30);
  });

  it("shows its loads: in /engines/state the last load times and whether a cache was restored, in /metrics their histogram", async () => {
    // Since the restart: ai/talk loaded once, its cache restored.
    const state = (await ask(tcp(), "GET", "/engines/state")).json();
    expect(state.loads.in_progress).toEqual([]);
    expect(state.loads.last["ai/talk:latest"]).toEqual([{ mode: "completion", seconds: expect.any(Number), cache_restored: true, at: expect.any(Number) }]);
    await unloadAll();
    await removeEntry((await entryOf("ai/other"))!);
    await complete("ai/other", "a model whose cache is gone");
    const metrics = (await ask(tcp(), "GET", "/metrics")).body;
    expect(metrics).toMatch(/^# TYPE llamadock_runner_load_duration_seconds histogram$/m);
    expect(metrics).toMatch(/^llamadock_runner_load_duration_seconds_count\{model="ai\/talk:latest",mode="completion",cache_restored="true"\} 1$/m);
    expect(metrics).toMatch(/^llamadock_runner_load_duration_seconds_count\{model="ai\/other:latest",mode="completion",cache_restored="false"\} 1$/m);
    expect(metrics).toMatch(/^llamadock_runner_load_duration_seconds_bucket\{model="ai\/talk:latest",mode="completion",cache_restored="true",le="\+Inf"\} 1$/m);
  });

  it("ignores and removes a corrupt or truncated file, and one saved for another runner", async () => {
    await unloadAll();
    const talk = join(folder(), (await entryOf("ai/talk"))!);
    // Corrupt: same size, other bytes in the middle of the KV data.
    const bytes = await readFile(talk);
    bytes.fill(0x5a, bytes.length >> 1, (bytes.length >> 1) + 4096);
    await writeFile(talk, bytes);
    const corrupt = await complete("ai/talk", `${START}\nline 120: and then`);
    expect(corrupt.prompt_n).toBeGreaterThan(1500);
    expect(stack.server.output()).toMatch(/slot cache: \S+\.bin does not match its runner or is damaged: removed/);
    await unloadAll();
    // Truncated.
    const saved = (await entryOf("ai/talk"))!;
    await truncate(join(folder(), saved), 1000);
    expect((await complete("ai/talk", `${START}\nline 120: and then`)).prompt_n).toBeGreaterThan(1500);
    expect(await entryOf("ai/talk")).toBeUndefined(); // removed, and the runner loaded is not saved yet
    // Another runner's: ai/talk's entry put in place of ai/other's (its metadata names ai/talk's key).
    await unloadAll();
    await complete("ai/other", `${START}\nfor the other model`);
    await unloadAll();
    const other = (await entryOf("ai/other"))!;
    const mine = (await entryOf("ai/talk"))!;
    for (const ext of [".bin", ".json"]) await writeFile(join(folder(), other.replace(/\.bin$/, ext)), await readFile(join(folder(), mine.replace(/\.bin$/, ext))));
    const mismatched = await complete("ai/other", `${START}\nfor the other model, again`);
    expect(mismatched.prompt_n).toBeGreaterThan(1500);
    // Only ai/talk's own entry is left: the copy under ai/other's name was removed.
    expect(await entries()).toEqual([mine]);
  });

  it("never lets a client reach the slot API or name the folder", async () => {
    for (const path of ["/slots/0?action=save", "/engines/llama.cpp/slots/0?action=restore", "/v1/slots/0?action=save"]) {
      const answer = await ask(tcp(), "POST", path, { filename: "x.bin" });
      expect(answer.status).toBe(404);
      expect(answer.json().error).toBeDefined();
    }
    const flags = await ask(tcp(), "POST", "/engines/_configure", { model: "ai/talk", "runtime-flags": ["--slot-save-path", "/tmp"] });
    expect(flags.status).toBe(400);
  });

  it("a reload for settings that keep the cache's meaning (a keep-alive) saves it and restores it", async () => {
    await complete("ai/talk", `${START}\nreload 1`);
    expect((await ask(tcp(), "POST", "/engines/_configure", { model: "ai/talk", keep_alive: "10m" })).status).toBe(202);
    // The old runner saved its slot as it stopped; the new one (preloaded, or loaded now) restored it.
    const reloaded = await complete("ai/talk", `${START}\nreload 1\nreload 2`);
    expect(reloaded.prompt_n).toBeLessThan(30);
  });

  it("drops the saves that a SIGTERM leaves no grace for", async () => {
    await stack.restart({ SHUTDOWN_GRACE_MS: "0" });
    const entry = (await entryOf("ai/talk"))!;
    const before = await tokensIn(entry);
    const turn = await complete("ai/talk", `${START}\nreload 1\nreload 2\nand a turn that is never saved`);
    expect(turn.prompt_n).toBeLessThan(60);
    // This process has no grace: its runner stops unsaved; the entry is as it was.
    await stack.restart();
    expect(await tokensIn(entry)).toBe(before);
    expect(stack.server.output()).not.toMatch(/slot cache: .* not saved/);
  });
});

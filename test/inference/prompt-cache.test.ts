import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./harness.ts";
import { ask } from "../support/http.ts";
import { tinyLlamaGguf, type TinyGgufOptions } from "../support/tiny-gguf.ts";
import { readGgufConfig } from "../../src/models/gguf.ts";
import { estimateMemory, shapeOf } from "../../src/scheduler/memory/estimate.ts";

// The runners' host prompt cache end to end: the server under Bun, a budget of two runners' whole
// estimates (their prompt caches included), and real llama-server runners. Many distinct long
// conversations fill the first runner's prompt cache past its limit; its resident memory grows by
// no more than the cache its estimate counts (the whole process stays within its whole estimate),
// and a second model still loads beside it within the
// budget, the first left loaded.

const MIB = 1024 * 1024;
const CACHE = { bytes: 24 * MIB, checkpoints: 4 };
// 4 KiB of KV cache a token: a 3000-token conversation is about 12 MiB of saved state, the cache
// holds two. (Measured without --cache-ram, at llama-server's own 8 GiB: it kept all twelve and
// grew by 140 MiB, from 62 to 202 MiB, past its whole 91.5 MiB estimate.)
const SHAPE: TinyGgufOptions = { embedding: 256, heads: 4, layers: 4, feedForward: 512, context: 4096 };
const SLOTS = 2;
const CONVERSATIONS = 12;
const PROMPT_TOKENS = 3000;

let stack: Stack;
let cost: number;
let budget: number;

/** A runner's whole estimate at its full context (the trained one for each slot), as the scheduler makes it. */
async function estimateOf(shape: TinyGgufOptions): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), "llamadock-cache-"));
  try {
    const bytes = tinyLlamaGguf(shape);
    await writeFile(join(dir, "m.gguf"), bytes);
    const config = await readGgufConfig(join(dir, "m.gguf"), bytes.length);
    return estimateMemory(shapeOf(config.gguf ?? {})!, bytes.length, { contextSize: 4096 * SLOTS, slots: SLOTS, promptCache: CACHE }).total;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

beforeAll(async () => {
  cost = await estimateOf(SHAPE);
  budget = Math.floor(2.2 * cost);
  stack = await startStack({
    models: [],
    shaped: { "ai/first": { ...SHAPE, seed: 1 }, "ai/second": { ...SHAPE, seed: 2 } },
    env: { INFERENCE_MAX_RUNNERS: "4", INFERENCE_SLOTS: String(SLOTS), INFERENCE_MEMORY_BUDGET: String(budget), INFERENCE_CACHE_RAM: "24MiB", INFERENCE_CTX_CHECKPOINTS: "4" },
  });
}, 120_000);
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
type PsEntry = { model_name: string; context_size: number; memory: { total_bytes: number; prompt_cache_bytes: number; host_bytes: number } };
const ps = async () => (await ask(tcp(), "GET", "/engines/ps")).json() as PsEntry[];
const entry = async (model: string) => (await ps()).find((r) => r.model_name.includes(model));
const rssOf = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;
/** A prompt of byte tokens that shares no prefix with another seed's. */
const conversation = (seed: number) => Array.from({ length: PROMPT_TOKENS }, (_, i) => String.fromCharCode(97 + ((seed * 7 + i * (seed + 3)) % 26))).join("");

async function complete(model: string, prompt: string): Promise<void> {
  const answer = await ask(tcp(), "POST", "/v1/completions", { model, prompt, max_tokens: 1 });
  expect(answer.status).toBe(200);
}

/** The llama-server process serving `model` (its --alias). */
async function pidOf(model: string): Promise<number> {
  for (const pid of await stack.runnerPids()) {
    const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    if (args[args.indexOf("--alias") + 1]?.includes(model)) return pid;
  }
  throw new Error(`no runner for ${model}`);
}

describe("the runners' prompt caches within the budget", () => {
  it("a runner's prompt cache filled with many long conversations grows it by no more than its estimate counts", async () => {
    await complete("ai/first", "warm up");
    const pid = await pidOf("ai/first");
    const base = rssOf(pid);
    for (let seed = 0; seed < CONVERSATIONS; seed++) await complete("ai/first", conversation(seed));
    const growth = rssOf(pid) - base;
    const first = (await entry("ai/first"))!;
    expect(first.context_size).toBe(4096 * SLOTS);
    expect(first.memory.total_bytes).toBe(cost);
    // On a CPU budget the cache is part of the total: limit + one slot's state (16 MiB).
    expect(first.memory.prompt_cache_bytes).toBe(CACHE.bytes + 16 * MIB);
    expect(first.memory.host_bytes).toBe(0);
    console.log(`first runner: RSS ${(base / MIB).toFixed(1)} -> ${(rssOf(pid) / MIB).toFixed(1)} MiB, growth ${(growth / MIB).toFixed(1)} MiB; counted cache ${(first.memory.prompt_cache_bytes / MIB).toFixed(1)} MiB of ${(first.memory.total_bytes / MIB).toFixed(1)} MiB`);
    // Filled: more than its limit's half of new resident memory, and within what is counted.
    expect(growth).toBeGreaterThan(CACHE.bytes / 2);
    expect(growth).toBeLessThanOrEqual(1.1 * first.memory.prompt_cache_bytes);
    // And the whole process (its libraries too) within its whole estimate.
    expect(rssOf(pid)).toBeLessThanOrEqual(1.1 * first.memory.total_bytes);
    const log = await stack.runnerLogs();
    expect(log).toMatch(/making room for prompt cache entry, removing oldest entry/);
  });

  it("a second model still loads beside it within the budget, the first left loaded", async () => {
    const firstPid = await pidOf("ai/first");
    // Its own cache, set per model: smaller than the default, in its flags and its estimate.
    expect((await ask(tcp(), "POST", "/engines/_configure", { model: "ai/second", "cache-ram": "lots" })).status).toBe(400);
    const configured = await ask(tcp(), "POST", "/engines/_configure", { model: "ai/second", "cache-ram": "8MiB" });
    expect(configured.status).toBe(202);
    expect(configured.json().settings).toMatchObject({ "cache-ram": 8 * MIB });
    await complete("ai/second", conversation(100));
    const secondArgs = readFileSync(`/proc/${await pidOf("ai/second")}/cmdline`, "utf8").split("\0");
    expect(secondArgs[secondArgs.indexOf("--cache-ram") + 1]).toBe("8");
    expect((await entry("ai/second"))!.memory.prompt_cache_bytes).toBe(8 * MIB + 16 * MIB);
    const loaded = await ps();
    expect(loaded.map((r) => r.model_name).sort()).toEqual([expect.stringMatching(/ai\/first/), expect.stringMatching(/ai\/second/)]);
    expect(await pidOf("ai/first")).toBe(firstPid);
    const counted = loaded.reduce((sum, r) => sum + r.memory.total_bytes, 0);
    expect(counted).toBeLessThanOrEqual(budget);
    expect(rssOf(firstPid) + rssOf(await pidOf("ai/second"))).toBeLessThanOrEqual(budget);
    console.log(`both runners: counted ${(counted / MIB).toFixed(1)} MiB of a ${(budget / MIB).toFixed(1)} MiB budget; RSS ${(rssOf(firstPid) / MIB).toFixed(1)} + ${(rssOf(await pidOf("ai/second")) / MIB).toFixed(1)} MiB`);
  });
});

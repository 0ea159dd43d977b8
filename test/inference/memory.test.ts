import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Stack } from "./harness.ts";
import { memoryBudget, startBudgetStack, WEIGHTS } from "./memory-budget.ts";
import { until } from "../support/until.ts";
import { ask, openStream } from "../support/http.ts";
import { tinyLlamaHeader } from "../support/tiny-gguf.ts";

// Scheduling by memory end to end: the server under Bun, tiny models pulled from a real registry,
// real llama-server runners, a budget of two and a half tiny models (the runner count is no limit
// here). `ai/long` is the tiny model with a trained context of 65536 tokens: it never fits whole.

const TINY_HEADER = { ...tinyLlamaHeader(65536), "llama.attention.head_count_kv": "4" };
const { cost, budget: BUDGET } = memoryBudget(TINY_HEADER);

let stack: Stack;
beforeAll(async () => {
  stack = await startBudgetStack(BUDGET, 1024);
});
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
const CHAT = "/engines/llama.cpp/v1/chat/completions";
const chat = (model: string) => ({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
const endless = (model: string) => ({ model, prompt: "x", max_tokens: 1_000_000, ignore_eos: true, stream: true });
type PsEntry = { model_name: string; in_use: boolean; context_size: number; memory: { where: string; total_bytes: number; kv_cache_bytes: number } };
const ps = async () => (await ask(tcp(), "GET", "/engines/ps")).json() as PsEntry[];
const short = (name: string) => name.replace(/^(.*\/)?ai\//, "").replace(/:latest$/, "");
const loaded = async () => (await ps()).map((r) => short(r.model_name)).sort();
const entry = async (model: string) => (await ps()).find((r) => short(r.model_name) === model);
const unloadAll = () => ask(tcp(), "POST", "/engines/unload", { all: true });
const configure = (body: object) => ask(tcp(), "POST", "/engines/_configure", body);

describe("memory-aware scheduling", () => {
  it("keeps two models that fit together loaded", async () => {
    for (const model of ["ai/alpha", "ai/beta", "ai/alpha", "ai/beta"]) expect((await ask(tcp(), "POST", CHAT, chat(model))).status).toBe(200);
    expect(await loaded()).toEqual(["alpha", "beta"]);
    const runners = await ps();
    for (const r of runners) expect(r.memory).toMatchObject({ where: "cpu", total_bytes: cost(512) });
    expect(runners.reduce((sum, r) => sum + r.memory.total_bytes, 0)).toBeLessThanOrEqual(BUDGET);
  });

  it("evicts the least recently used idle one for a third", async () => {
    // beta was used last: alpha goes.
    expect((await ask(tcp(), "POST", CHAT, chat("ai/gamma"))).status).toBe(200);
    expect(await loaded()).toEqual(["beta", "gamma"]);
  });

  it("never evicts a busy one: the request waits for it, then loads", async () => {
    // The endless generations go on past the tiny context of 512 tokens.
    for (const model of ["ai/alpha", "ai/beta"]) expect((await configure({ model, "runtime-flags": ["--context-shift"] })).status).toBe(202);
    await unloadAll();
    const alpha = openStream(tcp(), "/v1/completions", endless("ai/alpha"));
    await alpha.started;
    const beta = openStream(tcp(), "/v1/completions", endless("ai/beta"));
    await beta.started;
    let answered = false;
    const gamma = ask(tcp(), "POST", CHAT, chat("ai/gamma")).finally(() => (answered = true));
    // It waits: neither busy runner is unloaded, and nothing is loaded on top of them.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(answered).toBe(false);
    expect(await loaded()).toEqual(["alpha", "beta"]);
    alpha.hangUp();
    expect((await gamma).status).toBe(200);
    expect(await loaded()).toEqual(["beta", "gamma"]);
    beta.hangUp();
    await until(async () => (await ps()).every((r) => !r.in_use), "idle runners");
  });

  it("answers 507 at once for a model too big for the budget, naming the numbers", async () => {
    const before = await loaded();
    const answer = await ask(tcp(), "POST", CHAT, chat("ai/huge"));
    expect(answer.status).toBe(507);
    expect(answer.json().error).toMatchObject({ type: "unavailable_error", code: "model_too_large" });
    expect(answer.json().error.message).toMatch(/^model \S*ai\/huge:latest needs [\d.]+MiB \(weights [\d.]+MiB, KV cache [\d.]+MiB for 512 tokens, compute [\d.]+MiB, prompt cache [\d.]+MiB\) but the memory budget is [\d.]+MiB; it does not fit with any context size$/);
    // Nothing was unloaded for it.
    expect(await loaded()).toEqual(before);
  });

  it("gives a model without a configured context the largest that fits beside the others", async () => {
    await unloadAll();
    expect((await ask(tcp(), "POST", CHAT, chat("ai/beta"))).status).toBe(200);
    const free = BUDGET - (await entry("beta"))!.memory.total_bytes;
    expect((await ask(tcp(), "POST", CHAT, chat("ai/long"))).status).toBe(200);
    const long = (await entry("long"))!;
    expect(long.context_size).toBeGreaterThan(1024);
    expect(long.context_size % 256).toBe(0);
    expect(long.memory.total_bytes).toBe(cost(long.context_size));
    expect(long.memory.total_bytes).toBeLessThanOrEqual(free);
    expect(cost(long.context_size + 256)).toBeGreaterThan(free);
    expect(await loaded()).toEqual(["beta", "long"]);
    // Alone it gets more.
    await unloadAll();
    expect((await ask(tcp(), "POST", CHAT, chat("ai/long"))).status).toBe(200);
    const alone = (await entry("long"))!;
    expect(alone.context_size).toBeGreaterThan(long.context_size);
    expect(cost(alone.context_size + 256)).toBeGreaterThan(BUDGET);
  });

  it("when not even the floor fits beside the others, unloads the least recently used idle one, then fits beside the rest", async () => {
    await unloadAll();
    for (const model of ["ai/alpha", "ai/beta"]) expect((await ask(tcp(), "POST", CHAT, chat(model))).status).toBe(200);
    expect(BUDGET - 2 * cost(512)).toBeLessThan(cost(1024));
    expect((await ask(tcp(), "POST", CHAT, chat("ai/long"))).status).toBe(200);
    expect(await loaded()).toEqual(["beta", "long"]);
    const long = (await entry("long"))!;
    expect(long.context_size).toBeGreaterThanOrEqual(1024);
    expect(cost(long.context_size + 256)).toBeGreaterThan(BUDGET - cost(512));
  });

  it("bounds an Ollama num_ctx by what fits, the saved settings as they were", async () => {
    await unloadAll();
    const saved = async () => (await ask(tcp(), "GET", "/engines/_configure?model=ai/long")).json();
    const before = await saved();
    const answer = await ask(tcp(), "POST", "/api/generate", { model: "ai/long", prompt: "hi", stream: false, options: { num_ctx: 65536, num_predict: 1 } });
    expect(answer.status).toBe(200);
    // The largest context that fits the whole budget, not the 65536 asked for (nor a 507).
    const long = (await entry("long"))!;
    expect(long.context_size).toBeLessThan(65536);
    expect(cost(long.context_size)).toBeLessThanOrEqual(BUDGET);
    expect(cost(long.context_size + 256)).toBeGreaterThan(BUDGET);
    expect(await saved()).toEqual(before);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/long"))).status).toBe(200);
  });

  it("answers 507 for a configured context that cannot fit, with the context that would", async () => {
    expect((await configure({ model: "ai/long", "context-size": 65536 })).status).toBe(202);
    const answer = await ask(tcp(), "POST", CHAT, chat("ai/long"));
    expect(answer.status).toBe(507);
    const fitting = Number(/a context size of (\d+) tokens would fit$/.exec(answer.json().error.message)?.[1]);
    expect(cost(fitting)).toBeLessThanOrEqual(BUDGET);
    expect(cost(fitting + 256)).toBeGreaterThan(BUDGET);
    expect(answer.json().error.message).toMatch(/for 65536 tokens/);
  });

  it("shows the numbers: ps, status?memory, df", async () => {
    expect((await ask(tcp(), "POST", CHAT, chat("ai/alpha"))).status).toBe(200);
    const runners = await ps();
    const status = (await ask(tcp(), "GET", "/engines/status?memory")).json();
    expect(status.memory).toEqual({
      where: "cpu",
      budget_bytes: BUDGET,
      used_bytes: runners.reduce((sum, r) => sum + r.memory.total_bytes, 0),
      free_bytes: BUDGET - runners.reduce((sum, r) => sum + r.memory.total_bytes, 0),
      source: "setting",
      reserve_bytes: 0,
      devices: [],
    });
    // Without asking, DMR's shape: strings only.
    expect(Object.keys((await ask(tcp(), "GET", "/engines/status")).json())).toEqual(["llama.cpp"]);
    const df = (await ask(tcp(), "GET", "/engines/df")).json();
    // Five tiny models and huge's 70 MiB are in the store; the engine is its binary and libraries.
    expect(df.models_disk_usage).toBeGreaterThan(5 * WEIGHTS + 60 * 1024 * 1024);
    expect(df.default_backend_disk_usage).toBeGreaterThan(1024 * 1024);
  });
});

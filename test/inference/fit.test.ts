import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Stack } from "./harness.ts";
import { memoryBudget, startBudgetStack } from "./memory-budget.ts";
import { ask, openStream } from "../support/http.ts";
import { until } from "../support/until.ts";
import { tinyLlamaHeader } from "../support/tiny-gguf.ts";
import { llamadock } from "../cli/command.ts";

// "Will it fit?" end to end: the server under Bun, tiny models from a real registry, real
// llama-server runners, a budget of two and a half tiny models. Each answer is checked against
// what a real load does right after it: fits (alone, beside), evicts, does not fit.

const { cost, budget: BUDGET } = memoryBudget(tinyLlamaHeader());

let stack: Stack;
beforeAll(async () => {
  stack = await startBudgetStack(BUDGET, 512);
});
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
const CHAT = "/engines/llama.cpp/v1/chat/completions";
const chat = (model: string) => ({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
type PsEntry = { model_name: string; context_size: number; memory: { total_bytes: number } };
const ps = async () => (await ask(tcp(), "GET", "/engines/ps")).json() as PsEntry[];
const short = (name: string) => name.replace(/^(.*\/)?ai\//, "").replace(/:latest$/, "");
const loaded = async () => (await ps()).map((r) => short(r.model_name)).sort();
const entry = async (model: string) => (await ps()).find((r) => short(r.model_name) === model)!;
const fit = async (query: string) => {
  const answer = await ask(tcp(), "GET", `/engines/fit?${query}`);
  return { status: answer.status, body: answer.json() };
};
const names = (runners: { model: string }[]) => runners.map((r) => short(r.model)).sort();

describe("will it fit", () => {
  it("fits alone: the context and memory it names are what the load then gets, and it started nothing", async () => {
    const pids = await stack.runnerPids();
    const { status, body } = await fit("model=ai/alpha");
    expect(status).toBe(200);
    expect(body).toMatchObject({ fits: true, action: "load", alone: true, context_size: 512, slots: 1, memory: { where: "cpu", total_bytes: cost(512) }, evicts: [], beside: [] });
    expect(body.budget).toMatchObject({ budget_bytes: BUDGET, used_bytes: 0 });
    expect(await stack.runnerPids()).toEqual(pids);
    expect(await loaded()).toEqual([]);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/alpha"))).status).toBe(200);
    expect(await entry("alpha")).toMatchObject({ context_size: body.context_size, slots: body.slots, memory: { total_bytes: body.memory.total_bytes } });
    expect((await fit("model=ai/alpha")).body).toMatchObject({ fits: true, action: "loaded", context_size: 512, slots: body.slots });
  });

  it("fits beside what is loaded, and the load keeps it", async () => {
    const { body } = await fit("model=ai/beta");
    expect(body).toMatchObject({ fits: true, action: "load", alone: false, evicts: [] });
    expect(names(body.beside)).toEqual(["alpha"]);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/beta"))).status).toBe(200);
    expect(await loaded()).toEqual(["alpha", "beta"]);
  });

  it("names the idle runner a load evicts, and the load evicts that one", async () => {
    // beta was used last: alpha goes.
    const { body } = await fit("model=ai/gamma");
    expect(body).toMatchObject({ fits: true, action: "evict", waits_for: [] });
    expect(names(body.evicts)).toEqual(["alpha"]);
    expect(names(body.beside)).toEqual(["beta"]);
    expect(await loaded()).toEqual(["alpha", "beta"]);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/gamma"))).status).toBe(200);
    expect(await loaded()).toEqual(["beta", "gamma"]);
  });

  it("does not fit: 507 with the context that would, as the load answers; that context then fits", async () => {
    const before = await loaded();
    const refused = await fit("model=ai/long&context=65536");
    expect(refused.status).toBe(507);
    expect(refused.body.error).toMatchObject({ type: "unavailable_error", code: "model_too_large" });
    const fitting = refused.body.fitting_context_size as number;
    expect(cost(fitting)).toBeLessThanOrEqual(BUDGET);
    expect(cost(fitting + 256)).toBeGreaterThan(BUDGET);
    expect(refused.body).toMatchObject({ fits: false, context_size: 65536, total_bytes: cost(65536) });
    expect(await loaded()).toEqual(before);
    // The real load, configured so: the same 507, word for word.
    expect((await ask(tcp(), "POST", "/engines/_configure", { model: "ai/long", "context-size": 65536 })).status).toBe(202);
    const load = await ask(tcp(), "POST", CHAT, chat("ai/long"));
    expect(load.status).toBe(507);
    expect(load.json().error).toEqual(refused.body.error);
    // With the context it named it fits, by evicting every idle runner; the load does just that.
    const { body } = await fit(`model=ai/long&context=${fitting}`);
    expect(body).toMatchObject({ fits: true, action: "evict", context_size: fitting, memory: { total_bytes: cost(fitting) } });
    expect(names(body.evicts)).toEqual(before);
    expect((await ask(tcp(), "POST", "/engines/_configure", { model: "ai/long", "context-size": fitting })).status).toBe(202);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/long"))).status).toBe(200);
    expect(await loaded()).toEqual(["long"]);
    expect(await entry("long")).toMatchObject({ context_size: fitting, memory: { total_bytes: cost(fitting) } });
  });

  it("a model too large with any context: 507 and no context named, as the load answers", async () => {
    const refused = await fit("model=ai/huge");
    expect(refused.status).toBe(507);
    expect(refused.body.fitting_context_size).toBeNull();
    const load = await ask(tcp(), "POST", CHAT, chat("ai/huge"));
    expect(load.status).toBe(507);
    expect(load.json().error).toEqual(refused.body.error);
  });

  it("POST takes the same question as a JSON body", async () => {
    const answer = await ask(tcp(), "POST", "/engines/fit", { model: "ai/long", "context-size": 65536 });
    expect(answer.status).toBe(507);
    expect(answer.json().error.code).toBe("model_too_large");
  });

  it("refuses a question it cannot answer in JSON errors", async () => {
    expect((await fit("")).body.error).toMatchObject({ code: "invalid_request" });
    expect((await fit("model=ai/alpha&context=lots")).status).toBe(400);
    expect((await fit("model=ai/nope")).body.error).toMatchObject({ code: "model_not_found" });
  });

  it("llamadock fit says it in a line, and exits 1 when the model does not fit", async () => {
    const env = { MODEL_RUNNER_SOCK: stack.socket };
    const fits = await llamadock(["fit", "ai/alpha"], env);
    expect(fits.code).toBe(0);
    expect(fits.stdout).toMatch(/^\S*ai\/alpha:latest fits once \S*ai\/long:latest \([\d.]+ ?\w+\) is unloaded: context 512 tokens; /);
    const refused = await llamadock(["fit", "ai/long", "--context", "65536"], env);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toMatch(/does not fit: .*\nIt would fit with --context \d+\.\n$/);
    const json = await llamadock(["fit", "ai/long", "--json"], env);
    expect(JSON.parse(json.stdout)).toMatchObject({ fits: true, action: "loaded" });
  });

  it("waits for busy runners: the answer names them, the load waits for them, and the page's state shows it queued", async () => {
    const endless = (model: string) => ({ model, prompt: "x", max_tokens: 1_000_000, ignore_eos: true, stream: true });
    await ask(tcp(), "POST", "/engines/unload", { all: true });
    // The endless generations go on past the tiny context of 512 tokens.
    for (const model of ["ai/alpha", "ai/beta"]) expect((await ask(tcp(), "POST", "/engines/_configure", { model, "runtime-flags": ["--context-shift"] })).status).toBe(202);
    const alpha = openStream(tcp(), "/v1/completions", endless("ai/alpha"));
    await alpha.started;
    const beta = openStream(tcp(), "/v1/completions", endless("ai/beta"));
    await beta.started;
    const { body } = await fit("model=ai/gamma");
    expect(body).toMatchObject({ fits: true, action: "wait", evicts: [] });
    expect(names(body.waits_for)).toEqual(["alpha", "beta"]);
    const gamma = ask(tcp(), "POST", CHAT, chat("ai/gamma"));
    const state = async () => (await ask(tcp(), "GET", "/engines/state")).json().loads;
    await until(async () => (await state()).in_progress.some((l: { model: string; phase: string }) => short(l.model) === "gamma" && l.phase === "queued"), "gamma queued");
    expect(await loaded()).toEqual(["alpha", "beta"]);
    alpha.hangUp();
    expect((await gamma).status).toBe(200);
    expect(await loaded()).toEqual(["beta", "gamma"]);
    beta.hangUp();
    const after = await state();
    expect(after.in_progress).toEqual([]);
    // Its slot was saved when ai/long evicted it above: this load restored it.
    expect(after.last["ai/gamma:latest"][0]).toMatchObject({ mode: "completion", seconds: expect.any(Number), cache_restored: true });
  });
});

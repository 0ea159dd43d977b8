import { readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";

// The slot-cache side channel, end to end: the server under Bun with two keys, a tiny model (a
// trained context of 4096, one token per byte) from a real registry, a real llama-server runner of
// one slot. A prompt that starts as another key's did is answered from that key's cache unless
// INFERENCE_PROMPT_CACHE_PER_KEY=true; what shows it is llama-server's own count of the tokens it
// took from its cache (`timings.cache_n`, `prompt_tokens_details.cached_tokens`).

const KEYS = { alice: "sk-alice-apart-31", bob: "sk-bob-apart-47" };
/** Alice's conversation: a long start that bob guesses. */
const START = Array.from({ length: 40 }, (_, i) => `line ${i}: alice's private notes on the quick brown fox.`).join("\n");
/** Tokens of START, at least (a token a byte, less the merges of the vocabulary). */
const LONG = 1500;

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: [], shaped: { "ai/talk": { context: 4096, seed: 5 } }, env: { INFERENCE_SLOTS: "1", INFERENCE_MAX_RUNNERS: "1" } });
  await writeFile(join(stack.dir, "keys"), `${KEYS.alice} name=alice admin\n${KEYS.bob} name=bob\n`);
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

const folder = () => join(stack.dir, "models", "slot-cache");
const metas = async () => (await readdir(folder()).catch(() => [] as string[])).filter((n) => n.endsWith(".json"));
/** The key names each saved entry holds (undefined: saved without them). */
const savedHolders = async () => Promise.all((await metas()).map(async (n) => (JSON.parse(await readFile(join(folder(), n), "utf8")) as { holders?: string[] }).holders));
const forgetSaved = async () => rm(folder(), { recursive: true, force: true });
const restart = (perKey: boolean) => stack.restart({ API_KEYS_FILE: join(stack.dir, "keys"), INFERENCE_PROMPT_CACHE_PER_KEY: String(perKey) });
const unload = async () => expect((await ask({ url: stack.url }, "POST", "/engines/unload", { all: true }, { authorization: `Bearer ${KEYS.alice}` })).status).toBe(200);

type Timings = { prompt_n: number; cache_n: number };
async function complete(key: keyof typeof KEYS, prompt: string): Promise<Timings> {
  const answer = await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/talk", prompt, max_tokens: 2, temperature: 0 }, { authorization: `Bearer ${KEYS[key]}` });
  expect(answer.status, answer.body).toBe(200);
  return answer.json().timings as Timings;
}

/** A chat turn: llama-server's counts, in its timings and in OpenAI's usage. */
async function chat(key: keyof typeof KEYS, content: string): Promise<Timings & { cached_tokens: number }> {
  const body = { model: "ai/talk", messages: [{ role: "user", content }], max_tokens: 2, temperature: 0 };
  const answer = await ask({ url: stack.url }, "POST", "/v1/chat/completions", body, { authorization: `Bearer ${KEYS[key]}` });
  expect(answer.status, answer.body).toBe(200);
  const { timings, usage } = answer.json() as { timings: Timings; usage: { prompt_tokens_details?: { cached_tokens: number } } };
  return { ...timings, cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

describe("a prompt that starts as another key's", () => {
  it("shared caches (the default): answered from the other key's cache, and its count says so", async () => {
    await restart(false);
    expect((await complete("alice", START)).prompt_n).toBeGreaterThan(LONG);
    const guess = await complete("bob", `${START}\nline 40: bob guesses`);
    expect(guess.cache_n).toBeGreaterThan(LONG);
    expect(guess.prompt_n).toBeLessThan(50);
    await unload();
    expect(await savedHolders()).toEqual([undefined]); // no names kept without the setting
  }, 120_000);

  it("per key: a runner that restored a slot saved without names reuses it for no one", async () => {
    await restart(true);
    const resumed = await complete("alice", `${START}\nline 40: alice goes on`);
    expect([resumed.cache_n, resumed.prompt_n > LONG]).toEqual([0, true]);
    await unload();
    expect(await savedHolders()).toEqual([["(unknown)", "alice"]]);
    await forgetSaved();
  }, 120_000);

  it("per key: a key reuses its own cache; another key's guess reuses nothing, nor does anyone's after it", async () => {
    expect((await chat("alice", START)).prompt_n).toBeGreaterThan(LONG);
    const own = await chat("alice", `${START}\nline 40: alice goes on`);
    expect(own.cache_n).toBeGreaterThan(LONG);
    expect(own.cached_tokens).toBe(own.cache_n);
    const guess = await chat("bob", `${START}\nline 40: bob guesses`);
    expect([guess.cache_n, guess.cached_tokens, guess.prompt_n > LONG]).toEqual([0, 0, true]);
    // The runner has held both keys' prompts: alice's own start is no longer reused either.
    const after = await chat("alice", `${START}\nline 40: alice goes on again`);
    expect([after.cache_n, after.prompt_n > LONG]).toEqual([0, true]);
    await unload();
    expect(await savedHolders()).toEqual([["alice", "bob"]]);
    // Restored, the slot still holds both keys' prompts: reused for neither.
    expect((await complete("bob", `${START}\nline 40: bob guesses`)).cache_n).toBe(0);
    await unload();
    await forgetSaved();
  }, 180_000);

  it("per key: a slot saved with one key's prompts is restored for that key alone", async () => {
    await complete("alice", START);
    await unload();
    expect(await savedHolders()).toEqual([["alice"]]);
    const resumed = await complete("alice", `${START}\nline 40: alice goes on`);
    expect(resumed.cache_n).toBeGreaterThan(LONG);
    const guess = await complete("bob", `${START}\nline 40: bob guesses`);
    expect([guess.cache_n, guess.prompt_n > LONG]).toEqual([0, true]);
  }, 120_000);
});

describe("per key, in the other dialects", () => {
  /** What each dialect says it took from the cache, read from its own answer. */
  const DIALECTS = {
    responses: {
      path: "/v1/responses",
      body: (content: string) => ({ model: "ai/talk", max_output_tokens: 2, input: [{ role: "user", content }] }),
      cached: (json: any) => (json.usage.input_tokens_details?.cached_tokens ?? 0) as number,
    },
    anthropic: {
      path: "/v1/messages",
      body: (content: string) => ({ model: "ai/talk", max_tokens: 2, messages: [{ role: "user", content }] }),
      cached: (json: any) => json.usage.cache_read_input_tokens as number,
    },
  };

  it.each(Object.keys(DIALECTS) as (keyof typeof DIALECTS)[])("%s: the key's own prompt reuses its cache, another key's reuses nothing", async (dialect) => {
    const { path, body, cached } = DIALECTS[dialect];
    await unload();
    await forgetSaved();
    const send = async (key: keyof typeof KEYS, content: string) => {
      const answer = await ask({ url: stack.url }, "POST", path, body(content), { authorization: `Bearer ${KEYS[key]}` });
      expect(answer.status, answer.body).toBe(200);
      return cached(answer.json());
    };
    expect(await send("alice", START)).toBe(0);
    // The same start through this dialect is reused for its key: the guess below could be too.
    expect(await send("alice", `${START}\nline 40: alice goes on`)).toBeGreaterThan(LONG);
    expect(await send("bob", `${START}\nline 40: bob guesses`)).toBe(0);
  }, 120_000);

  // Anthropic's Messages go to llama-server as chats (with cache_prompt: false for another key):
  // nothing of alice's is reused for bob, whole or streamed, and his usage counts his whole prompt.
  it("anthropic: another key's prompt reuses nothing, whole or streamed", async () => {
    const body = (content: string, stream: boolean) => ({ model: "ai/talk", max_tokens: 2, stream, messages: [{ role: "user", content }] });
    await unload();
    await forgetSaved();
    expect((await ask({ url: stack.url }, "POST", "/v1/messages", body(START, false), { authorization: `Bearer ${KEYS.alice}` })).status).toBe(200);
    const whole = await ask({ url: stack.url }, "POST", "/v1/messages", body(`${START}\nline 40: bob guesses`, false), { authorization: `Bearer ${KEYS.bob}` });
    expect(whole.status, whole.body).toBe(200);
    expect(whole.json().usage.cache_read_input_tokens).toBe(0);
    expect(whole.json().usage.input_tokens).toBeGreaterThan(LONG);
    const streamed = await ask({ url: stack.url }, "POST", "/v1/messages", body(`${START}\nline 40: bob guesses again`, true), { authorization: `Bearer ${KEYS.bob}` });
    expect(streamed.status, streamed.body).toBe(200);
    const start = JSON.parse(/event: message_start\ndata: (.+)/.exec(streamed.body)![1]!) as { message: { usage: { cache_read_input_tokens: number; input_tokens: number } } };
    expect(start.message.usage.cache_read_input_tokens).toBe(0);
    expect(start.message.usage.input_tokens).toBeGreaterThan(LONG);
    expect(streamed.body).toContain("message_stop");
    // Its usage counts the whole prompt.
    const usage = await ask({ url: stack.url }, "GET", "/engines/usage?key=bob&by=key", undefined, { authorization: `Bearer ${KEYS.alice}` });
    expect(usage.json().total.prompt_tokens).toBeGreaterThan(LONG);
  }, 120_000);
});

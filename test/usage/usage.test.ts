import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask, call, type Answer, type Target } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "../inference/harness.ts";
import { llamadock } from "../cli/command.ts";

// Named keys, usage per key and model, and each key's limits, through real HTTP, real runners and
// the server as users run it: every dialect's tokens as llama-server counted them, kept across a
// restart, shown at /engines/usage (a key its own, an admin all), by `llamadock usage` and in
// /metrics by key name; and 429s with Retry-After and x-ratelimit-* in each dialect's shape. The
// tokens-per-minute limit, which waits out its minute, is in token-limit.test.ts.

const KEYS = {
  alice: "sk-alice-7c1f0e",
  bob: "sk-bob-93ad2b",
  carol: "sk-carol-5e81aa",
  dave: "sk-dave-c0ffee",
  legacy: "sk-legacy-unnamed-44b2",
};
const KEY_FILE = [
  "# the team's keys",
  `${KEYS.alice} name=alice admin`,
  `${KEYS.bob} name=bob rpm=2`,
  `${KEYS.carol} name=carol tpm=10`,
  `${KEYS.dave} name=dave in_flight=1`,
  KEYS.legacy,
].join("\n");

const as = (key: string) => ({ authorization: `Bearer ${key}` });
const COMPLETION = 3;

let stack: Stack;
let tcp: Target;

beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"], embedders: ["ai/embed"] });
  await writeFile(join(stack.dir, "keys"), KEY_FILE);
  await stack.restart({ API_KEYS_FILE: join(stack.dir, "keys"), INFERENCE_SLOTS: "2" });
  tcp = { url: stack.url };
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

type Row = { day: string; key: string; model: string; requests: number; prompt_tokens: number; cached_tokens: number; completion_tokens: number; errors: number };
const usageOf = async (key: string, query = "") => {
  const answer = await ask(tcp, "GET", `/engines/usage${query}`, undefined, as(key));
  expect(answer.status).toBe(200);
  return answer.json() as { caller: string; data: Row[]; total: Row };
};
const totalOf = async (key: string, model: string) => (await usageOf(KEYS.alice, `?key=${key}&model=${encodeURIComponent(model)}&by=key,model`)).total;

/** What one request added to alice's usage of `model`. */
async function added(model: string, send: () => Promise<Answer>): Promise<Row> {
  const before = await totalOf("alice", model);
  const answer = await send();
  expect(answer.status, answer.body).toBe(200);
  const after = await totalOf("alice", model);
  const delta = { ...after };
  for (const field of ["requests", "prompt_tokens", "cached_tokens", "completion_tokens", "errors"] as const) delta[field] = after[field] - before[field];
  return delta;
}

const chat = { model: "ai/tiny", messages: [{ role: "user", content: "hello there" }], max_tokens: COMPLETION, ...NO_EARLY_STOP };
const post = (path: string, body: object, key = KEYS.alice) => () => ask(tcp, "POST", path, body, as(key));

describe("usage per key and model, in every dialect", () => {
  const MODEL = "ai/tiny:latest";
  const cases: [string, () => Promise<Answer>][] = [
    ["OpenAI chat", post("/v1/chat/completions", chat)],
    ["OpenAI chat, streamed", post("/v1/chat/completions", { ...chat, stream: true })],
    ["OpenAI completions", post("/v1/completions", { model: "ai/tiny", prompt: "hello there", max_tokens: COMPLETION, ...NO_EARLY_STOP })],
    ["Anthropic messages", post("/v1/messages", chat)],
    ["Responses", post("/v1/responses", { model: "ai/tiny", input: "hello there", max_output_tokens: COMPLETION, ...NO_EARLY_STOP })],
    ["Responses, streamed", post("/v1/responses", { model: "ai/tiny", input: "hello there", max_output_tokens: COMPLETION, stream: true, ...NO_EARLY_STOP })],
    ["Ollama chat", post("/api/chat", { model: "ai/tiny", messages: chat.messages, stream: false, options: { num_predict: COMPLETION, ...NO_EARLY_STOP } })],
    ["Ollama generate, streamed", post("/api/generate", { model: "ai/tiny", prompt: "hello there", options: { num_predict: COMPLETION, ...NO_EARLY_STOP } })],
  ];
  it.each(cases)("%s: one request, its prompt tokens and its completion tokens", async (_name, send) => {
    const delta = await added(MODEL, send);
    expect(delta.requests).toBe(1);
    expect(delta.errors).toBe(0);
    expect(delta.prompt_tokens).toBeGreaterThan(0);
    expect(delta.completion_tokens).toBe(COMPLETION);
  });

  it("Anthropic messages, streamed: the prompt as its events say it, never 0 (also where llama-server left message_start out)", async () => {
    let text = "";
    const delta = await added(MODEL, async () => {
      const answer = await post("/v1/messages", { ...chat, stream: true })();
      text = answer.body;
      return answer;
    });
    expect(delta).toMatchObject({ requests: 1, errors: 0, completion_tokens: COMPLETION });
    // llama-server (v0.5.0) sometimes leaves out message_start; ours, put in its place, has the prompt as the runner counted it.
    const start = JSON.parse(/event: message_start\ndata: (.*)\n/.exec(text)![1]!) as { message: { usage: { input_tokens: number; cache_read_input_tokens?: number } } };
    const { input_tokens, cache_read_input_tokens = 0 } = start.message.usage;
    expect(delta.prompt_tokens).toBeGreaterThan(0);
    expect(delta.prompt_tokens).toBe(input_tokens + cache_read_input_tokens);
  });

  it("a returning turn: the part of its prompt read from the runner's cache is counted apart, as cached", async () => {
    const session = { ...chat, messages: [{ role: "system", content: "You answer briefly." }, ...chat.messages], user: "usage-returning" };
    expect((await post("/v1/chat/completions", session)()).status).toBe(200);
    let timings = { prompt_n: 0, cache_n: 0 };
    const again = { ...session, messages: [...session.messages, { role: "assistant", content: "Hello." }, { role: "user", content: "And then?" }] };
    const delta = await added(MODEL, async () => {
      const answer = await post("/v1/chat/completions", again)();
      timings = answer.json().timings;
      return answer;
    });
    expect(timings.cache_n).toBeGreaterThan(0);
    expect([delta.prompt_tokens, delta.cached_tokens]).toEqual([timings.prompt_n + timings.cache_n, timings.cache_n]);
  });

  it("embeddings count their input tokens", async () => {
    const delta = await added("ai/embed:latest", post("/v1/embeddings", { model: "ai/embed", input: ["hello there", "and more"] }));
    expect(delta).toMatchObject({ requests: 1, errors: 0, completion_tokens: 0 });
    expect(delta.prompt_tokens).toBeGreaterThan(2);
  });

  it("a model not found: its errors counted under (unknown), never under the name sent", async () => {
    const before = await totalOf("alice", "(unknown)");
    expect((await ask(tcp, "POST", "/v1/chat/completions", { ...chat, model: "ai/missing" }, as(KEYS.alice))).status).toBe(404);
    expect((await ask(tcp, "POST", "/v1/messages", { ...chat, model: "ai/missing" }, as(KEYS.alice))).status).toBe(404);
    const after = await totalOf("alice", "(unknown)");
    expect([after.requests - before.requests, after.errors - before.errors]).toEqual([2, 2]);
    expect((await usageOf(KEYS.alice, "?model=ai/missing")).data).toEqual([]);
  });

  it("a model not found in Ollama's dialect: each route's 404 counted under (unknown) as well, never under the name sent", async () => {
    const before = await totalOf("alice", "(unknown)");
    const missing = [
      ["/api/chat", { model: "ai/missing", messages: chat.messages, stream: false }],
      ["/api/generate", { model: "ai/missing", prompt: "hello there", stream: false }],
      ["/api/embed", { model: "ai/missing", input: "hello there" }],
      ["/api/embeddings", { model: "ai/missing", prompt: "hello there" }],
      // Ollama's load (no messages) of a model not found is refused as well.
      ["/api/chat", { name: "ai/missing" }],
    ] as const;
    for (const [path, body] of missing) {
      const answer = await ask(tcp, "POST", path, body, as(KEYS.alice));
      expect([answer.status, answer.json().error], path).toEqual([404, expect.stringContaining("ai/missing")]);
    }
    const after = await totalOf("alice", "(unknown)");
    expect([after.requests - before.requests, after.errors - before.errors]).toEqual([missing.length, missing.length]);
    expect((await usageOf(KEYS.alice, "?model=ai/missing")).data).toEqual([]);
  });

  it("a key without a name is known by a digest of it, never by the key", async () => {
    expect((await post("/v1/chat/completions", chat, KEYS.legacy)()).status).toBe(200);
    const own = await usageOf(KEYS.legacy);
    expect(own.caller).toMatch(/^key-[0-9a-f]{8}$/);
    expect(own.data.map((r) => r.key)).toEqual([own.caller]);
  });
});

describe("who sees what", () => {
  it("a key sees its own usage; asking for another's is refused; an admin key sees all", async () => {
    expect((await post("/v1/chat/completions", chat, KEYS.dave)()).status).toBe(200);
    const dave = await usageOf(KEYS.dave);
    expect(dave.caller).toBe("dave");
    expect(new Set(dave.data.map((r) => r.key))).toEqual(new Set(["dave"]));
    const theirs = await ask(tcp, "GET", "/engines/usage?key=alice", undefined, as(KEYS.dave));
    expect([theirs.status, theirs.json().error.code]).toEqual([403, "usage_not_yours"]);
    const all = await usageOf(KEYS.alice, "?by=key");
    expect(all.data.map((r) => r.key)).toEqual(expect.arrayContaining(["alice", "dave"]));
    expect((await ask(tcp, "GET", "/engines/usage")).status).toBe(401);
  });

  it("/metrics counts by key name; no key appears in metrics, answers or logs", async () => {
    const metrics = (await ask(tcp, "GET", "/metrics", undefined, as(KEYS.alice))).body;
    expect(metrics).toMatch(/^llamadock_key_requests_total\{key="alice",model="ai\/tiny:latest"\} \d+$/m);
    expect(metrics).toMatch(/^llamadock_key_tokens_total\{key="alice",model="ai\/tiny:latest",kind="completion"\} \d+$/m);
    expect(metrics).toMatch(/^llamadock_key_prompt_tokens_cached_total\{key="alice",model="ai\/tiny:latest"\} [1-9]\d*$/m);
    const usage = (await ask(tcp, "GET", "/engines/usage", undefined, as(KEYS.alice))).body;
    for (const key of Object.values(KEYS)) {
      expect(metrics).not.toContain(key);
      expect(usage).not.toContain(key);
      expect(stack.server.output()).not.toContain(key);
    }
  });

  it("`llamadock usage` shows the table: every key's on the socket, one's own with a key over TCP", async () => {
    const onSocket = await llamadock(["usage", "--by", "key,model"], { MODEL_RUNNER_SOCK: stack.socket });
    expect(onSocket.code, onSocket.stderr).toBe(0);
    expect(onSocket.stdout).toMatch(/^KEY\s+MODEL\s+REQUESTS\s+PROMPT TOKENS\s+CACHED\s+COMPLETION TOKENS\s+ERRORS/);
    expect(onSocket.stdout).toMatch(/^alice\s+ai\/tiny:latest\s+\d+/m);
    expect(onSocket.stdout).toMatch(/^dave\s+ai\/tiny:latest\s+1\s+/m);
    const dave = await llamadock(["usage", "--by", "key", "--json"], { MODEL_RUNNER_HOST: stack.url, MODEL_RUNNER_API_KEY: KEYS.dave });
    expect(dave.code, dave.stderr).toBe(0);
    expect((JSON.parse(dave.stdout) as { data: Row[] }).data.map((r) => r.key)).toEqual(["dave"]);
  });
});

describe("limits per key", () => {
  it("requests per minute: past it, 429 with Retry-After and x-ratelimit-* in each dialect's shape", async () => {
    for (let i = 0; i < 2; i++) {
      const ok = await post("/v1/chat/completions", chat, KEYS.bob)();
      expect(ok.status).toBe(200);
      expect(ok.headers["x-ratelimit-limit-requests"]).toBe("2");
      expect(ok.headers["x-ratelimit-remaining-requests"]).toBe(String(1 - i));
    }
    const openai = await post("/v1/chat/completions", chat, KEYS.bob)();
    expect(openai.status).toBe(429);
    expect(openai.json().error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" });
    expect(openai.json().error.message).toContain("key bob");
    expect(Number(openai.headers["retry-after"])).toBeGreaterThanOrEqual(1);
    expect(openai.headers).toMatchObject({ "x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "0" });
    expect(openai.headers["x-ratelimit-reset-requests"]).toMatch(/^\d+(ms|s)$|^\d+m\d+s$/);
    const anthropic = await post("/v1/messages", chat, KEYS.bob)();
    expect([anthropic.status, anthropic.json().type, anthropic.json().error.type]).toEqual([429, "error", "rate_limit_error"]);
    expect(anthropic.headers["retry-after"]).toBeDefined();
    expect(anthropic.headers["x-ratelimit-limit-requests"]).toBe("2");
    const ollama = await post("/api/chat", { model: "ai/tiny", messages: chat.messages, stream: false }, KEYS.bob)();
    expect(ollama.status).toBe(429);
    expect(typeof ollama.json().error).toBe("string");
    expect(ollama.headers["retry-after"]).toBeDefined();
    const metrics = (await ask(tcp, "GET", "/metrics", undefined, as(KEYS.alice))).body;
    expect(metrics).toContain('llamadock_key_rate_limited_total{key="bob",limit="requests_per_minute"} 3');
    expect((await usageOf(KEYS.bob, "?by=key")).total).toMatchObject({ requests: 5, errors: 3 });
  });

  it("requests in flight: a second while one streams is refused, and admitted once it ended", async () => {
    const long = call(tcp, "POST", "/v1/chat/completions", { ...chat, max_tokens: 200, stream: true }, as(KEYS.dave));
    // Its headers came: it holds its place until its stream ends.
    await new Promise((resolve) => long.request.once("response", resolve));
    const refused = await post("/v1/chat/completions", chat, KEYS.dave)();
    expect(refused.status).toBe(429);
    expect(refused.json().error.message).toContain("in flight");
    expect((await long.answer).body).toContain("[DONE]");
    expect((await post("/v1/chat/completions", chat, KEYS.dave)()).status).toBe(200);
  });

  it("/metrics shows a key its own series, its refusals included, as /engines/usage shows its own rows; an admin key every key's", async () => {
    const keysIn = async (key: string, family: string) => {
      const text = (await ask(tcp, "GET", "/metrics", undefined, as(key))).body;
      return [...new Set([...text.matchAll(new RegExp(`^${family}\\{key="([^"]+)"`, "gm"))].map((m) => m[1]))].sort();
    };
    // carol's minute filled, then a refusal (the limit waited out is token-limit.test.ts's).
    expect((await post("/v1/chat/completions", { ...chat, max_tokens: 12 }, KEYS.carol)()).status).toBe(200);
    expect((await post("/v1/chat/completions", chat, KEYS.carol)()).status).toBe(429);
    expect(await keysIn(KEYS.bob, "llamadock_key_requests_total")).toEqual(["bob"]);
    expect(await keysIn(KEYS.bob, "llamadock_key_rate_limited_total")).toEqual(["bob"]);
    expect(await keysIn(KEYS.dave, "llamadock_key_rate_limited_total")).toEqual(["dave"]);
    expect(await keysIn(KEYS.alice, "llamadock_key_requests_total")).toEqual(expect.arrayContaining(["alice", "bob", "carol", "dave"]));
    expect(await keysIn(KEYS.alice, "llamadock_key_rate_limited_total")).toEqual(["bob", "carol", "dave"]);
  });
});

describe("kept across restarts", () => {
  it("the usage file is written beside the settings, holds names only, and is read back at start", async () => {
    const before = await usageOf(KEYS.alice, "?by=key");
    await stack.restart({ API_KEYS_FILE: join(stack.dir, "keys") });
    tcp = { url: stack.url };
    const text = await readFile(join(stack.dir, "usage.json"), "utf8");
    for (const key of Object.values(KEYS)) expect(text).not.toContain(key);
    expect((await usageOf(KEYS.alice, "?by=key")).data).toEqual(before.data);
  });
});

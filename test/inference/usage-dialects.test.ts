import Anthropic from "@anthropic-ai/sdk";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { until } from "../support/until.ts";
import { startStack, type Stack } from "./harness.ts";
import type { RuntimeName } from "../support/server-process.ts";
import { CHAT_MODEL, TIME_PARAMETERS, WEATHER_PARAMETERS } from "../support/chat-model.ts";

// Usage an agent can trust: in every dialect, streamed or whole, through its official client, the
// prompt, cached and completion tokens are those llama-server counted for that very request: the
// tokens it processed and generated as its runner's log says them (print_timing), the prompt's size
// as its tokenizer says it (count_tokens, asked on the runner's own socket); the cached part is the
// rest. For a prompt never seen, the same again (all but one token cached) and the same prefix with
// a new tail; then several streams at once. /engines/usage counts the same.

/** The server the helpers below ask: under Bun, and in the last describe under Node and Deno. */
let stack: Stack;
/** Generations asked of its runner so far: each is one task in its log. */
let generations = 0;
async function startUsageStack(runtime: RuntimeName): Promise<Stack> {
  // A context of 4096 a slot (four slots): room for prompts of a few thousand tokens.
  // ai/chat (a tool-calling template) is only pulled: its runner loads in the last tests under Bun,
  // after those that read the runner log of ai/long.
  const started = await startStack({ runtime, models: [], shaped: { "ai/long": { seed: 3, context: 16_384 }, "ai/chat": CHAT_MODEL } });
  // Loaded, so that its runner's socket is there to ask.
  expect((await ask({ url: started.url }, "POST", "/v1/chat/completions", { model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "hi" }] })).status).toBe(200);
  generations = 1;
  return started;
}
beforeAll(async () => {
  stack = await startUsageStack("bun");
});
afterAll(async () => {
  await stack?.stop();
});

const MODEL = "ai/long";
const MAX_TOKENS = 6;

/** What a client reports: the prompt's tokens, the part of them read from the cache, the tokens generated. */
type Reported = { prompt: number; cached: number; output: number };
type Dialect = (text: string, stream: boolean) => Promise<Reported>;

const anthropic = () => new Anthropic({ baseURL: stack.url, apiKey: "unused", maxRetries: 0 });
const openai = () => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
const ollama = () => new Ollama({ host: stack.url });

/** Anthropic's split summed back: input is what was not read from the cache (nor written to it). */
function fromAnthropic(usage: { input_tokens: number; cache_read_input_tokens?: number | null; cache_creation_input_tokens?: number | null; output_tokens: number }): Reported {
  const cached = usage.cache_read_input_tokens ?? 0;
  return { prompt: usage.input_tokens + cached + (usage.cache_creation_input_tokens ?? 0), cached, output: usage.output_tokens };
}

/** An Anthropic stream through the official client: its events checked, its final usage. */
async function anthropicStream(body: Anthropic.MessageCreateParamsNonStreaming): Promise<Reported> {
  generations++;
  const events: Anthropic.RawMessageStreamEvent[] = [];
  const messages = anthropic().messages.stream(body);
  for await (const event of messages) events.push(event);
  const final = await messages.finalMessage();
  const start = events.find((e) => e.type === "message_start")!;
  const delta = events.find((e) => e.type === "message_delta")!;
  expect(events[0]).toBe(start);
  // The final usage repeats the prompt's, as Anthropic's API does; the SDK's final message has it.
  const { output_tokens: _, ...input } = start.message.usage;
  expect(delta.usage).toMatchObject(input);
  expect(final.usage).toMatchObject({ ...input, output_tokens: delta.usage.output_tokens });
  expect(start.message.id).toMatch(/^msg_/);
  return fromAnthropic(final.usage);
}

const DIALECTS: Record<string, Dialect> = {
  async "anthropic messages"(text, stream) {
    const body = { model: MODEL, max_tokens: MAX_TOKENS, messages: [{ role: "user" as const, content: text }] };
    if (!stream) {
      generations++;
      const message = await anthropic().messages.create(body);
      expect(message.usage.cache_creation_input_tokens).toBe(0);
      return fromAnthropic(message.usage);
    }
    return anthropicStream(body);
  },
  async "openai chat completions"(text, stream) {
    generations++;
    const body = { model: MODEL, max_tokens: MAX_TOKENS, messages: [{ role: "user" as const, content: text }] };
    let usage: OpenAI.CompletionUsage | undefined;
    if (stream) {
      for await (const chunk of await openai().chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })) usage = chunk.usage ?? usage;
    } else {
      usage = (await openai().chat.completions.create(body)).usage;
    }
    return { prompt: usage!.prompt_tokens, cached: usage!.prompt_tokens_details!.cached_tokens!, output: usage!.completion_tokens };
  },
  async "openai responses"(text, stream) {
    generations++;
    const body = { model: MODEL, max_output_tokens: MAX_TOKENS, input: text, store: false };
    let usage: OpenAI.Responses.ResponseUsage | undefined;
    if (stream) {
      for await (const event of await openai().responses.create({ ...body, stream: true })) if (event.type === "response.completed") usage = event.response.usage;
    } else {
      usage = (await openai().responses.create(body)).usage;
    }
    expect(usage!.total_tokens).toBe(usage!.input_tokens + usage!.output_tokens);
    return { prompt: usage!.input_tokens, cached: usage!.input_tokens_details.cached_tokens, output: usage!.output_tokens };
  },
  async "ollama chat"(text, stream) {
    generations++;
    const body = { model: MODEL, messages: [{ role: "user", content: text }], options: { num_predict: MAX_TOKENS } };
    return fromOllama(stream ? await lastOf(await ollama().chat({ ...body, stream: true })) : await ollama().chat({ ...body, stream: false }));
  },
  async "ollama generate"(text, stream) {
    generations++;
    const body = { model: MODEL, prompt: text, options: { num_predict: MAX_TOKENS } };
    return fromOllama(stream ? await lastOf(await ollama().generate({ ...body, stream: true })) : await ollama().generate({ ...body, stream: false }));
  },
};

async function lastOf<T>(parts: AsyncIterable<T>): Promise<T> {
  let last: T | undefined;
  for await (const part of parts) last = part;
  return last!;
}

/** Ollama's counters: prompt_eval_count is the whole prompt, prompt_eval_cached_count its cached part. */
function fromOllama(answer: { done: boolean; prompt_eval_count: number; eval_count: number }): Reported {
  expect(answer.done).toBe(true);
  return { prompt: answer.prompt_eval_count, cached: (answer as unknown as { prompt_eval_cached_count: number }).prompt_eval_cached_count, output: answer.eval_count };
}

/** The runner's socket, to ask llama-server itself. */
async function runnerSocket(): Promise<string> {
  const run = join(stack.dir, "run");
  const sockets = (await readdir(run)).filter((name) => name.endsWith(".sock"));
  expect(sockets).toHaveLength(1);
  return join(run, sockets[0]!);
}

/** The prompt's size as llama-server's tokenizer says it (one user message: the same prompt in every dialect). */
async function promptSize(text: string): Promise<number> {
  const answer = await ask({ socketPath: await runnerSocket() }, "POST", "/v1/messages/count_tokens", { model: MODEL, messages: [{ role: "user", content: text }] });
  expect(answer.status).toBe(200);
  return answer.json().input_tokens as number;
}

/** Each task's counts as llama-server logged them: tokens processed of the prompt, tokens generated. */
type Logged = { task: number; processed: number; generated: number };
async function loggedTasks(): Promise<Logged[]> {
  const log = await stack.runnerLogs();
  const processed = new Map([...log.matchAll(/task (\d+) \| prompt eval time = +[\d.]+ ms \/ +(\d+) tokens/g)].map((m) => [Number(m[1]), Number(m[2])]));
  const generated = [...log.matchAll(/task (\d+) \| +eval time = +[\d.]+ ms \/ +(\d+) tokens/g)];
  return generated.map((m) => ({ task: Number(m[1]), processed: processed.get(Number(m[1])) ?? 0, generated: Number(m[2]) }));
}

/**
 * The last task llama-server has logged once every generation asked so far is in its log (it is
 * written a little after the answer: on some runtimes the client has the answer first).
 */
async function lastTask(): Promise<number> {
  let tasks: Logged[] = [];
  await until(async () => (tasks = await loggedTasks()).length >= generations, "llama-server's log of the requests so far");
  return Math.max(-1, ...tasks.map((t) => t.task));
}

/** The one task llama-server logged after `before`: the request just answered. */
async function nextTask(before: number): Promise<Logged> {
  await lastTask();
  const found = (await loggedTasks()).filter((t) => t.task > before);
  expect(found).toHaveLength(1);
  return found[0]!;
}

async function ledgerTotal(): Promise<{ requests: number; prompt_tokens: number; completion_tokens: number }> {
  return (await ask({ url: stack.url }, "GET", "/engines/usage")).json().total;
}

/** A long prompt of its own: nothing in any slot begins like it. */
const prompt = (tag: string) => `${tag} ${crypto.randomUUID()} ${"The quick brown fox jumps over the lazy dog, then naps. ".repeat(40)}`;

describe.each(Object.keys(DIALECTS))("%s", (name) => {
  it.each([false, true])("stream %s: uncached, cached and partly cached prompts counted as llama-server counted them", async (stream) => {
    const base = prompt(name);
    const cases = [
      ["uncached", `${base} First question: what now?`],
      ["cached", `${base} First question: what now?`],
      ["partly cached", `${base} Second question, a longer one: and then?`],
    ] as const;
    for (const [what, text] of cases) {
      const before = await lastTask();
      const ledger = await ledgerTotal();
      const reported = await DIALECTS[name]!(text, stream);
      const logged = await nextTask(before);
      const size = await promptSize(text);
      const counted = { prompt: size, cached: size - logged.processed, output: logged.generated };
      expect(reported, what).toEqual(counted);
      if (what === "uncached") expect(counted.cached, what).toBeLessThan(size / 2);
      else expect(counted.cached, what).toBeGreaterThan(size / 2);
      if (what === "cached") expect(logged.processed, what).toBe(1);
      await until(async () => (await ledgerTotal()).requests > ledger.requests, "the ledger's count");
      const after = await ledgerTotal();
      expect({ prompt: after.prompt_tokens - ledger.prompt_tokens, output: after.completion_tokens - ledger.completion_tokens }, what).toEqual({ prompt: size, output: logged.generated });
    }
  });
});

/** 12 long prompts streamed 4 at a time: each with its whole prompt counted, the ledger the same. */
async function streamsAtOnce(name: string): Promise<void> {
  const texts = Array.from({ length: 12 }, (_, i) => prompt(`${name} ${i}`));
  const sizes = await Promise.all(texts.map(promptSize));
  const ledger = await ledgerTotal();
  const reported: Reported[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (next < texts.length) {
        const i = next++;
        reported[i] = await DIALECTS[name]!(texts[i]!, true);
      }
    }),
  );
  expect(reported.map((r) => r.prompt)).toEqual(sizes);
  expect(reported.every((r) => r.cached < r.prompt)).toBe(true);
  await until(async () => (await ledgerTotal()).requests >= ledger.requests + texts.length, "the ledger's count");
  const after = await ledgerTotal();
  const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
  expect({ prompt: after.prompt_tokens - ledger.prompt_tokens, output: after.completion_tokens - ledger.completion_tokens }).toEqual({
    prompt: sum(sizes),
    output: sum(reported.map((r) => r.output)),
  });
}

describe("several streams at once", () => {
  it.each(Object.keys(DIALECTS))("%s: 12 long prompts, 4 at a time, each with its whole prompt counted", streamsAtOnce);
});

describe("counting tokens", () => {
  it("is a request in the ledger, but no prompt was processed: no tokens", async () => {
    const text = prompt("count");
    const ledger = await ledgerTotal();
    const counted = await anthropic().messages.countTokens({ model: MODEL, messages: [{ role: "user", content: text }] });
    expect(counted.input_tokens).toBe(await promptSize(text));
    await until(async () => (await ledgerTotal()).requests > ledger.requests, "the ledger's count");
    const after = await ledgerTotal();
    expect([after.requests - ledger.requests, after.prompt_tokens - ledger.prompt_tokens, after.completion_tokens - ledger.completion_tokens]).toEqual([1, 0, 0]);
  });
});

describe("an agent's request: system blocks and tools (the chat model's tool template)", () => {
  const body: Anthropic.MessageCreateParamsNonStreaming = {
    model: "ai/chat",
    max_tokens: 200,
    system: [
      { type: "text", text: "x-anthropic-billing-header: cc_version=1; cc_entrypoint=sdk-cli;" },
      { type: "text", text: `You are a coding agent. ${"Read the code before you change it. ".repeat(20)}` },
    ],
    tools: [
      { name: "get_weather", description: "The weather in a city", input_schema: WEATHER_PARAMETERS as Anthropic.Tool.InputSchema },
      { name: "get_time", description: "The time in a zone", input_schema: TIME_PARAMETERS as Anthropic.Tool.InputSchema },
    ],
    messages: [{ role: "user", content: "Fix the failing test in main.ts, then run the tests again." }],
  };

  it("its count_tokens is the prompt it generates from, and streams report it, all but the last token from the cache", async () => {
    const whole = fromAnthropic((await anthropic().messages.create(body)).usage);
    expect(whole.prompt).toBeGreaterThan(500);
    expect((await anthropic().messages.countTokens(body)).input_tokens).toBe(whole.prompt);
    for (let i = 0; i < 3; i++) {
      const reported = await anthropicStream(body);
      expect([reported.prompt, reported.cached]).toEqual([whole.prompt, whole.prompt - 1]);
    }
  });
});

// The translated stream on the other runtimes.
describe.each(["node", "deno"] as const)("under %s", (runtime) => {
  let bun: { stack: Stack; generations: number };
  beforeAll(async () => {
    bun = { stack, generations };
    stack = await startUsageStack(runtime);
  });
  afterAll(async () => {
    await stack?.stop();
    ({ stack, generations } = bun);
  });

  it("Anthropic streams: 12 long prompts, 4 at a time, each with its whole prompt counted", () => streamsAtOnce("anthropic messages"));
});

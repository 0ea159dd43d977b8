import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask, openStream } from "../support/http.ts";
import { until } from "../support/until.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";
import { busySlots, runnerSocket } from "./runners.ts";

// What one request may take of a shared runner, through real llama-server runners: a ceiling on
// the tokens of a generation in every dialect's field (what llama-server generated is counted in
// its answer), a time limit, and a generation cancelled when its client stops reading.

const CEILING = 8;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** `promise`, or a clear failure naming what did not happen within 20 s. */
const within = <T>(promise: Promise<T>, what: string) =>
  Promise.race([promise, sleep(20_000).then(() => Promise.reject(new Error(`no ${what} within 20 s`)))]);
/** Greedy, and with a seed: the same tokens each time, so an early end of sequence is no chance. */
const greedy = { temperature: 0, seed: 1 };

describe("bounds on a shared runner", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ models: ["ai/tiny"], env: { INFERENCE_MAX_TOKENS: String(CEILING) } });
    // Context shift: without a bound, a generation goes on past the context.
    await ask({ url: stack.url }, "POST", "/engines/_configure", { model: "ai/tiny", "runtime-flags": ["--context-shift"] });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const tcp = () => ({ url: stack.url });
  const messages = [{ role: "user", content: "tell me" }];
  const chat = (extra: object) => ask(tcp(), "POST", "/v1/chat/completions", { model: "ai/tiny", messages, ...NO_EARLY_STOP, ...extra });
  const generated = async (answer: Promise<{ status: number; json(): any }>) => {
    const { status, json } = await answer;
    expect(status).toBe(200);
    return json();
  };

  it.each([
    ["no max_tokens", {}],
    ["max_tokens above it", { max_tokens: 100_000 }],
    ["max_completion_tokens above it", { max_completion_tokens: 100_000 }],
    ["llama-server's n_predict -1 (no limit)", { n_predict: -1 }],
    ["max_tokens null", { max_tokens: null }],
    ["a stream", { stream: true }],
  ])("OpenAI chat with %s generates the ceiling", async (_, extra) => {
    if ("stream" in extra) {
      const body = (await ask(tcp(), "POST", "/v1/chat/completions", { model: "ai/tiny", messages, ...NO_EARLY_STOP, stream: true, stream_options: { include_usage: true } })).body;
      const usage = body.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)).usage).find(Boolean);
      return expect(usage.completion_tokens).toBe(CEILING);
    }
    const answer = await generated(chat(extra));
    expect(answer.usage.completion_tokens).toBe(CEILING);
    expect(answer.choices[0].finish_reason).toBe("length");
  });

  it("keeps a limit below the ceiling as asked", async () => {
    expect((await generated(chat({ max_tokens: 3 }))).usage.completion_tokens).toBe(3);
    expect((await generated(chat({ max_completion_tokens: 5 }))).usage.completion_tokens).toBe(5);
  });

  it("bounds completions, Anthropic messages, Responses and Ollama alike", async () => {
    const completion = await generated(ask(tcp(), "POST", "/v1/completions", { model: "ai/tiny", prompt: "once", ...NO_EARLY_STOP }));
    expect(completion.usage.completion_tokens).toBe(CEILING);
    const message = await generated(ask(tcp(), "POST", "/v1/messages", { model: "ai/tiny", messages, max_tokens: 100_000, ...greedy }));
    expect([message.usage.output_tokens, message.stop_reason]).toEqual([CEILING, "max_tokens"]);
    const response = await generated(ask(tcp(), "POST", "/v1/responses", { model: "ai/tiny", input: "tell me", ...NO_EARLY_STOP }));
    expect(response.usage.output_tokens).toBe(CEILING);
    const longer = await generated(ask(tcp(), "POST", "/v1/responses", { model: "ai/tiny", input: "tell me", max_output_tokens: 100_000, ...NO_EARLY_STOP }));
    expect(longer.usage.output_tokens).toBe(CEILING);
    for (const options of [{}, { num_predict: -1 }, { num_predict: 100_000 }]) {
      const ollama = await generated(ask(tcp(), "POST", "/api/chat", { model: "ai/tiny", messages, stream: false, options: { ...options, ...greedy } }));
      expect([ollama.eval_count, ollama.done_reason]).toEqual([CEILING, "length"]);
    }
    const generate = await generated(ask(tcp(), "POST", "/api/generate", { model: "ai/tiny", prompt: "once", stream: false, options: { num_predict: 3, ...greedy } }));
    expect(generate.eval_count).toBe(3);
  });

  it("ends a request past its time limit with 504 request_timeout, and its generation stops", async () => {
    await stack.restart({ INFERENCE_MAX_TOKENS: "1000000", INFERENCE_REQUEST_TIMEOUT_MS: "1500" });
    const endless = (stream: boolean) => ({ model: "ai/tiny", prompt: "x", max_tokens: 1_000_000, ...NO_EARLY_STOP, stream });
    // A request well within the limit is not touched.
    expect((await ask(tcp(), "POST", "/v1/completions", { ...endless(false), max_tokens: 4 })).status).toBe(200);
    const runner = await runnerSocket(stack, "ai/tiny");
    const whole = await ask(tcp(), "POST", "/v1/completions", endless(false));
    expect(whole.status).toBe(504);
    expect(whole.json().error).toMatchObject({ type: "timeout_error", code: "request_timeout" });
    // llama-server notices a whole answer's client gone only after a second with no result on its
    // queue from any task (each /slots answer is one): asked seldom enough to let it.
    await until(async () => (await sleep(1500), (await busySlots(runner)) === 0), "llama-server to stop the whole answer's generation", 20);
    const stream = openStream(tcp(), "/v1/completions", endless(true), 3);
    await stream.started;
    const last = (await stream.ended).trim().split("\n\n").at(-1)!;
    expect(JSON.parse(last.replace(/^data: /, "")).error).toMatchObject({ code: "request_timeout" });
    await until(async () => (await busySlots(runner)) === 0, "llama-server to stop the stream's generation");
  });
});

describe.each(["bun", "node", "deno"] as const)("a client that stops reading, under %s", (runtime) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ runtime, models: ["ai/tiny"], env: { INFERENCE_SLOTS: "1", INFERENCE_CLIENT_STALL_TIMEOUT_MS: "1000" } });
    await ask({ url: stack.url }, "POST", "/engines/_configure", { model: "ai/tiny", "runtime-flags": ["--context-shift"] });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("has its generation cancelled while its connection is still open, and the slot serves others", async () => {
    // Large events (20 token probabilities each) fill the buffers between us and the client at once.
    const body = JSON.stringify({ model: "ai/tiny", prompt: "x", max_tokens: 30_000, ...NO_EARLY_STOP, n_probs: 20, stream: true });
    const socket = connect(Number(new URL(stack.url).port), "127.0.0.1");
    // The cut may come as a reset: the socket closes either way.
    socket.on("error", () => {});
    await within(new Promise((resolve) => socket.once("connect", resolve)), "connection");
    socket.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await within(new Promise((resolve) => socket.once("data", resolve)), "first bytes");
    socket.pause();
    const runner = await runnerSocket(stack, "ai/tiny");
    // Not read, the stream stops being pulled; once that lasts, its generation ends at llama-server.
    await until(async () => (await busySlots(runner)) === 0, "the unread generation to be cancelled");
    expect(socket.destroyed).toBe(false);
    // What the client gets when it reads again: the stream cut short, without its last event.
    let text = "";
    socket.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")));
    const closed = new Promise((resolve) => socket.once("close", resolve));
    socket.resume();
    await within(closed, "end of the connection");
    expect(text).not.toContain("data: [DONE]");
    const next = await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "x", max_tokens: 4 });
    expect(next.status).toBe(200);
  });
});

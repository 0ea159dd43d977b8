import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";
import { until } from "../support/until.ts";
import { ask, openStream } from "../support/http.ts";
import { busySlots, runnerPid, runnerSocket } from "./runners.ts";
import { CHAT_MODEL, COLOR_SCHEMA, parsedMisfit, ROOM } from "../support/chat-model.ts";

// The same server under Node and Deno (Bun runs the other files): the openai client chats and
// streams, an answer is held to a JSON schema, a client that hangs up frees the llama-server slot,
// and a runner that dies is answered, on these runtimes too.

describe.each(["node", "deno"] as const)("under %s", (runtime) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ runtime, models: ["ai/tiny"], rerankers: ["ai/reranker"], shaped: { "ai/chat": CHAT_MODEL } });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("chats and streams with the openai client", async () => {
    const client = new OpenAI({ baseURL: `${stack.url}/engines/v1`, apiKey: "unused", maxRetries: 0 });
    const completion = await client.chat.completions.create({ model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4, ...NO_EARLY_STOP });
    expect(completion.choices[0]!.message.role).toBe("assistant");
    const stream = await client.chat.completions.create({ model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 8, ...NO_EARLY_STOP, stream: true });
    let chunks = 0;
    for await (const _ of stream) chunks++;
    expect(chunks).toBeGreaterThan(1);
  });

  it("serves the Anthropic and Responses clients too", async () => {
    const anthropic = new Anthropic({ baseURL: stack.url, apiKey: "unused", maxRetries: 0 });
    const message = await anthropic.messages.create({ model: "ai/tiny", max_tokens: 4, messages: [{ role: "user", content: "hi" }] });
    expect(message.type).toBe("message");
    const openai = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const first = await openai.responses.create({ model: "ai/tiny", input: "hi", max_output_tokens: 2 });
    const second = await openai.responses.create({ model: "ai/tiny", input: "more", previous_response_id: first.id, max_output_tokens: 2 });
    expect(second.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens);
  });

  it("serves the Ollama client, and rerank", async () => {
    const ollama = new Ollama({ host: stack.url });
    expect((await ollama.list()).models.map((m) => m.name)).toContain("ai/tiny:latest");
    let last: { done: boolean; eval_count?: number } | undefined;
    for await (const part of await ollama.chat({ model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true, options: { num_predict: 2 } })) last = part;
    expect(last).toMatchObject({ done: true });
    const ranked = await ask({ url: stack.url }, "POST", "/v1/rerank", { model: "ai/reranker", query: "q", documents: ["a", "b"] });
    expect(ranked.json().results).toHaveLength(2);
  });

  it("holds an answer to a JSON schema (the openai client)", async () => {
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const format = { type: "json_schema" as const, json_schema: { name: "color", strict: true, schema: COLOR_SCHEMA } };
    const completion = await client.chat.completions.create({ model: "ai/chat", messages: [{ role: "user", content: "hi" }], response_format: format, max_tokens: ROOM, seed: 1 });
    expect(parsedMisfit(COLOR_SCHEMA, completion.choices[0]!.message.content)).toBeUndefined();
  });

  it("frees the llama-server slot when the client hangs up", async () => {
    const configured = await ask({ url: stack.url }, "POST", "/engines/_configure", { model: "ai/tiny", slots: 1, "runtime-flags": ["--context-shift"] });
    expect(configured.status).toBe(202);
    const body = { model: "ai/tiny", prompt: "x", max_tokens: 1_000_000, ignore_eos: true, stream: true };
    const stream = openStream({ url: stack.url }, "/v1/completions", body, 3);
    await stream.started;
    const runner = await runnerSocket(stack, "ai/tiny");
    expect(await busySlots(runner)).toBe(1);
    stream.hangUp();
    await until(async () => (await busySlots(runner)) === 0, "the slot to be freed");
  });

  // B17.3, found by the load test: under Deno, undici's body stream never ended when the runner
  // died mid-answer (an abort did not end it either), so the client waited forever.
  it("ends a stream whose runner is killed with an SSE error event, and answers 502 JSON when it dies before answering", async () => {
    const body = { model: "ai/tiny", prompt: "x", max_tokens: 1_000_000, ignore_eos: true };
    const stream = openStream({ socketPath: stack.socket }, "/exp/vDD4.40/v1/completions", { ...body, stream: true }, 3);
    await stream.started;
    process.kill(await runnerPid(stack, "ai/tiny"), "SIGKILL");
    const text = await stream.ended;
    expect(text.trimEnd().split("\n\n").at(-1)).toMatch(/^data: \{"error":\{"message":"the runner of model \S+ failed: .*SIGKILL/);

    const plain = ask({ url: stack.url }, "POST", "/v1/completions", body);
    // A fresh runner loads for it: look for its socket until it serves.
    await until(async () => (await busySlots(await runnerSocket(stack, "ai/tiny")).catch(() => 0)) === 1, "the generation to start");
    process.kill(await runnerPid(stack, "ai/tiny"), "SIGKILL");
    const answer = await plain;
    expect([answer.status, answer.json().error.code]).toEqual([502, "runner_failed"]);
  });
});

import Anthropic from "@anthropic-ai/sdk";
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject } from "ai";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as z from "zod";
import { ask } from "../support/http.ts";
import { CHAT_MODEL, COLOR_SCHEMA, parsedMisfit, ROOM } from "../support/chat-model.ts";
import { startStack, type Stack } from "./harness.ts";

// Structured output end to end through the official clients (openai, ollama, the Vercel AI SDK),
// the server under Bun, one real llama-server runner for the whole file, on a tiny model with a
// BPE vocabulary and a tool-calling chat template (test/support/chat-vocab.ts): grammar-constrained
// sampling makes even its random weights answer JSON that fits the schema.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: [], shaped: { "ai/chat": CHAT_MODEL } });
});
afterAll(async () => {
  await stack?.stop();
});

const openai = () => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
const ollama = () => new Ollama({ host: stack.url });
const colorFormat = { type: "json_schema" as const, json_schema: { name: "color", strict: true, schema: COLOR_SCHEMA } };
const hi = [{ role: "user" as const, content: "Pick a colour and a word." }];

/** The error a request was refused with (a request that is answered fails the test). */
const refusal = <E>(request: Promise<unknown>) =>
  request.then(
    () => expect.fail("answered, not refused"),
    (error: unknown) => error as E,
  );
type OpenAIError = InstanceType<typeof OpenAI.APIError>;

describe("OpenAI chat completions", () => {
  it("response_format json_schema (strict): the answer parses and fits the schema", async () => {
    const completion = await openai().chat.completions.create({ model: "ai/chat", messages: hi, response_format: colorFormat, max_tokens: ROOM, seed: 1 });
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    expect(parsedMisfit(COLOR_SCHEMA, completion.choices[0]!.message.content)).toBeUndefined();
  });

  it("the same, streamed", async () => {
    const stream = await openai().chat.completions.create({ model: "ai/chat", messages: hi, response_format: colorFormat, max_tokens: ROOM, seed: 2, stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(parsedMisfit(COLOR_SCHEMA, text)).toBeUndefined();
  });

  it("response_format json_object: the answer is a JSON object", async () => {
    const completion = await openai().chat.completions.create({ model: "ai/chat", messages: hi, response_format: { type: "json_object" }, max_tokens: ROOM, seed: 3 });
    expect(parsedMisfit({ type: "object" }, completion.choices[0]!.message.content)).toBeUndefined();
  });

  it("an answer cut by max_tokens comes back as it is, finish_reason length (llama-server does not close the JSON)", async () => {
    const completion = await openai().chat.completions.create({ model: "ai/chat", messages: hi, response_format: colorFormat, max_tokens: 2, seed: 1 });
    expect(completion.choices[0]!.finish_reason).toBe("length");
    expect(parsedMisfit(COLOR_SCHEMA, completion.choices[0]!.message.content)).toMatch(/^not JSON/);
  });
});

describe("Ollama", () => {
  it('format "json" (chat): the answer is a JSON object', async () => {
    const answer = await ollama().chat({ model: "ai/chat", messages: hi, format: "json", stream: false, options: { num_predict: ROOM, seed: 4 } });
    expect(parsedMisfit({ type: "object" }, answer.message.content)).toBeUndefined();
  });

  it("format <schema> (chat, streamed): the answer fits the schema", async () => {
    let text = "";
    for await (const part of await ollama().chat({ model: "ai/chat", messages: hi, format: COLOR_SCHEMA, stream: true, options: { num_predict: ROOM, seed: 5 } })) {
      text += part.message.content;
    }
    expect(parsedMisfit(COLOR_SCHEMA, text)).toBeUndefined();
  });

  it("format <schema> (generate): the answer fits the schema", async () => {
    const answer = await ollama().generate({ model: "ai/chat", prompt: "Pick a colour.", format: COLOR_SCHEMA, stream: false, options: { num_predict: ROOM, seed: 6 } });
    expect(parsedMisfit(COLOR_SCHEMA, answer.response)).toBeUndefined();
  });
});

describe("the Responses API", () => {
  it("text.format json_schema: the answer fits the schema (it was answered in free text)", async () => {
    const response = await openai().responses.create({
      model: "ai/chat",
      input: "Pick a colour and a word.",
      text: { format: { type: "json_schema", name: "color", strict: true, schema: COLOR_SCHEMA } },
      max_output_tokens: ROOM,
    });
    expect(parsedMisfit(COLOR_SCHEMA, response.output_text)).toBeUndefined();
  });

  it("the Vercel AI SDK's generateObject with its default provider (which speaks Responses)", async () => {
    const provider = createOpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused" });
    const { object } = await generateObject({
      model: provider("ai/chat"),
      schema: z.object({ color: z.enum(["red", "green", "blue"]), word: z.string().regex(/^[a-z]{1,8}$/) }),
      prompt: "Pick a colour and a word.",
      maxOutputTokens: ROOM,
      maxRetries: 0,
    });
    expect(["red", "green", "blue"]).toContain(object.color);
    // A pattern, not max(8): see COLOR_SCHEMA for why random weights can break a length held in code points.
    expect(object.word).toMatch(/^[a-z]{1,8}$/);
  });
});

describe("a schema llama-server cannot hold an answer to: 400 in each dialect's shape, before the runner", () => {
  // minLength above maxLength: llama-server's grammar builder loops, its memory growing, deaf to SIGTERM.
  const hangs = { type: "object", properties: { s: { type: "string", minLength: 5, maxLength: 2 } } };
  // \d is outside the patterns llama-server converts: with strict it would answer any string there.
  const digits = { type: "object", properties: { n: { type: "string", pattern: "^\\d+$" } } };

  it("OpenAI chat completions, strict and not", async () => {
    const refused = await refusal<OpenAIError>(
      openai().chat.completions.create({ model: "ai/chat", messages: hi, response_format: { type: "json_schema", json_schema: { name: "x", schema: hangs } } }),
    );
    expect([refused.status, refused.code]).toEqual([400, "invalid_schema"]);
    expect(refused.message).toMatch(/minLength 5 is above maxLength 2/);
    const strict = await refusal<OpenAIError>(
      openai().chat.completions.create({ model: "ai/chat", messages: hi, response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema: digits } } }),
    );
    expect([strict.status, strict.code]).toEqual([400, "invalid_schema"]);
    expect(strict.message).toMatch(/cannot enforce pattern/);
  });

  it("Ollama: {error} with status 400", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/api/chat", { model: "ai/chat", messages: hi, format: hangs, stream: false });
    expect(answer.status).toBe(400);
    expect(answer.json()).toEqual({ error: expect.stringMatching(/minLength 5 is above maxLength 2/) });
  });

  it("Anthropic: its error envelope", async () => {
    const anthropic = new Anthropic({ baseURL: stack.url, apiKey: "unused", maxRetries: 0 });
    const refused = await refusal<InstanceType<typeof Anthropic.APIError>>(
      anthropic.messages.create({ model: "ai/chat", max_tokens: 50, messages: hi, tools: [{ name: "f", input_schema: hangs as Anthropic.Tool.InputSchema }] }),
    );
    expect(refused.status).toBe(400);
    expect(refused.error).toEqual({ type: "error", error: { type: "invalid_request_error", message: expect.stringMatching(/minLength 5 is above maxLength 2/) } });
  });

  it("the Responses API", async () => {
    const refused = await refusal<OpenAIError>(
      openai().responses.create({ model: "ai/chat", input: "x", text: { format: { type: "json_schema", name: "x", strict: true, schema: digits } } }),
    );
    expect([refused.status, refused.code]).toEqual([400, "invalid_schema"]);
  });

  it("the runner serves on after them all", async () => {
    const completion = await openai().chat.completions.create({ model: "ai/chat", messages: hi, response_format: colorFormat, max_tokens: ROOM, seed: 7 });
    expect(parsedMisfit(COLOR_SCHEMA, completion.choices[0]!.message.content)).toBeUndefined();
  });
});

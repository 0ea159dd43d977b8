import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// Anthropic's Messages API with the official client (@anthropic-ai/sdk), the server under Bun,
// real llama-server runners: plain, streamed, with tools, token counting; and errors, ours and
// llama-server's, in Anthropic's envelope.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"] });
});
afterAll(async () => {
  await stack?.stop();
});

const client = (base: string) => new Anthropic({ baseURL: `${stack.url}${base}`, apiKey: "unused", maxRetries: 0 });
const hello = { model: "ai/tiny", max_tokens: 8, messages: [{ role: "user" as const, content: "hello" }] };

describe.each(["", "/anthropic", "/engines/llama.cpp"])("the anthropic client at %s/v1", (base) => {
  it("creates a message", async () => {
    const message = await client(base).messages.create({ ...hello, ...NO_EARLY_STOP } as Anthropic.MessageCreateParamsNonStreaming);
    expect(message.type).toBe("message");
    expect(message.role).toBe("assistant");
    expect(message.model).toMatch(/ai\/tiny:latest$/);
    expect(message.content[0]?.type).toBe("text");
    expect(message.usage.output_tokens).toBeGreaterThan(0);
  });

  it("streams a message, event by event", async () => {
    // Greedy, so that the answer is the same every run: a sampled one once came without any text
    // delta in a full run (the tiny model's tokens are bytes; likely all were pieces of characters,
    // which llama-server holds back). The greedy answer has text.
    const stream = client(base).messages.stream({ ...hello, ...NO_EARLY_STOP, temperature: 0 } as Anthropic.MessageCreateParamsNonStreaming);
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types[0]).toBe("message_start");
    expect(types).toContain("content_block_delta");
    expect(types.at(-1)).toBe("message_stop");
    expect((await stream.finalMessage()).content.length).toBeGreaterThan(0);
  });

  it("takes tools", async () => {
    // The tiny model calls no tool (its bytes never form a call): it answers text to its max_tokens.
    const message = await client(base).messages.create({
      ...hello,
      ...NO_EARLY_STOP,
      tools: [{ name: "get_weather", description: "The weather in a city", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }],
    } as Anthropic.MessageCreateParamsNonStreaming);
    expect(message.type).toBe("message");
    expect([message.stop_reason, message.content[0]?.type, message.usage.output_tokens]).toEqual(["max_tokens", "text", hello.max_tokens]);
  });

  it("counts tokens", async () => {
    const counted = await client(base).messages.countTokens({ model: "ai/tiny", messages: hello.messages });
    expect(counted.input_tokens).toBeGreaterThan(0);
  });
});

describe("errors in Anthropic's envelope", () => {
  it.each([
    ["a model it does not have", { ...hello, model: "ai/absent" }, 404, "not_found_error"],
    ["no max_tokens", { model: "ai/tiny", messages: hello.messages }, 400, "invalid_request_error"],
    ["no messages", { model: "ai/tiny", max_tokens: 4 }, 400, "invalid_request_error"],
    ["a refused field", { ...hello, n_discard: -1 }, 400, "invalid_request_error"],
  ])("%s", async (_, body, status, type) => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/messages", body);
    expect(answer.status).toBe(status);
    expect(answer.json()).toEqual({ type: "error", error: { type, message: expect.any(String) } });
  });

  it("a body over the limit: 413 request_too_large; the SDK reads it as an APIError", async () => {
    const error = await client("").messages.create({ ...hello, messages: [{ role: "user", content: "x".repeat(11 * 1024 * 1024) }] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(413);
    expect(((error as InstanceType<typeof Anthropic.APIError>).error as { error: { type: string } }).error.type).toBe("request_too_large");
  });

  it("llama-server's own error (a prompt over the context) comes in Anthropic's envelope too", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/messages", { ...hello, messages: [{ role: "user", content: "a ".repeat(3000) }] });
    expect(answer.status).toBe(400);
    expect(answer.json()).toEqual({ type: "error", error: { type: "invalid_request_error", message: expect.stringMatching(/context/i) } });
  });
});

// llama-server v0.5.0 leaves out message_start when the first token it generates ends in the middle
// of a character (on its own socket: 114-245 of 400 streams of these random weights, 4 at a time;
// one at a time too); the SDK then fails with "request ended without sending any chunks".
describe("every stream begins with message_start", () => {
  it("through us, 4 streams at a time", async () => {
    const failures: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < 120) {
          const i = next++;
          const answer = await ask({ url: stack.url }, "POST", "/v1/messages", { ...hello, ...NO_EARLY_STOP, stream: true });
          if (!answer.body.startsWith("event: message_start") || !answer.body.includes("event: message_stop")) failures.push(`${i}: ${answer.body.slice(0, 120)}`);
        }
      }),
    );
    expect(failures).toEqual([]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { startStack, type Stack } from "./harness.ts";

// A prompt longer than the model's context, as real llama-server refuses it: the opening request
// of a conversation (nothing earlier to leave out) in words of ours that name the fix, in each
// chat dialect's envelope; a conversation with earlier turns as llama-server says it, the words
// coding agents take as "compact and send again".

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: [], shaped: { "ai/chat": { vocabulary: "bpe", answers: "terse", context: 1024 } } });
}, 120_000);
afterAll(async () => {
  await stack?.stop();
});

const LONG = "The quick brown fox jumps over the lazy dog, then naps. ".repeat(100);
const OURS = /^ai\/chat:latest holds (\d+) tokens per request, and this conversation's opening request \(its system prompt, tools and first message\) is (\d+): leaving out earlier turns cannot make it fit\. Give the model a larger context \(`llamadock configure ai\/chat:latest --context-size N`, shared by its slots\) and start again$/;
const LLAMA_SERVER = /^request \(\d+ tokens\) exceeds the available context size \(\d+ tokens\), try increasing it$/;

describe("an opening request too long", () => {
  it("OpenAI chat: 400, code context_too_small, the sizes as llama-server gave them", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/chat", max_tokens: 4, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: LONG }] });
    expect(answer.status).toBe(400);
    const { error } = answer.json();
    expect(error).toMatchObject({ type: "exceed_context_size_error", code: "context_too_small" });
    const [, context, tokens] = OURS.exec(error.message)!;
    expect({ context: Number(context), tokens: Number(tokens) }).toEqual({ context: error.n_ctx, tokens: error.n_prompt_tokens });
    expect(error.n_prompt_tokens).toBeGreaterThan(error.n_ctx);
  });

  it("Anthropic messages: 400 in Anthropic's envelope", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/messages", { model: "ai/chat", max_tokens: 4, stream: true, system: "Be brief.", messages: [{ role: "user", content: LONG }] });
    expect(answer.status).toBe(400);
    expect(answer.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error", message: expect.stringMatching(OURS) } });
  });

  it("Responses: 400, code context_too_small", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/responses", { model: "ai/chat", max_output_tokens: 4, store: false, instructions: "Be brief.", input: LONG });
    expect(answer.status).toBe(400);
    expect(answer.json().error).toMatchObject({ code: "context_too_small", message: expect.stringMatching(OURS) });
  });
});

describe("a conversation with earlier turns too long", () => {
  it("OpenAI chat, an assistant turn before: llama-server's refusal as it came", async () => {
    const messages = [{ role: "user", content: "Hi." }, { role: "assistant", content: "Hello." }, { role: "user", content: LONG }];
    const answer = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/chat", max_tokens: 4, messages });
    expect(answer.status).toBe(400);
    const { error } = answer.json();
    expect(error).toMatchObject({ type: "exceed_context_size_error", message: expect.stringMatching(LLAMA_SERVER) });
    expect(error.code).not.toBe("context_too_small");
  });

  it("Responses, a tool call and its output before: llama-server's refusal as it came", async () => {
    const input = [
      { role: "user", content: "What time is it?" },
      { type: "function_call", call_id: "call_1", name: "clock", arguments: "{}" },
      { type: "function_call_output", call_id: "call_1", output: LONG },
    ];
    const tools = [{ type: "function", name: "clock", description: "the time", parameters: { type: "object", properties: {} } }];
    const answer = await ask({ url: stack.url }, "POST", "/v1/responses", { model: "ai/chat", max_output_tokens: 4, store: false, input, tools });
    expect(answer.status).toBe(400);
    expect(answer.json().error.message).toMatch(LLAMA_SERVER);
  });
});

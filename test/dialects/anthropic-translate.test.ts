import { describe, expect, it } from "vitest";
import { message, stopReason } from "../../src/dialects/anthropic/answer.ts";
import { chatRequest, steadyBillingHeader } from "../../src/dialects/anthropic/request.ts";
import { MessageEvents } from "../../src/dialects/anthropic/stream.ts";

// Anthropic's Messages translated into chat completions and back, pure: the request's blocks,
// tools and options; a whole answer; a stream's events in Anthropic's order, from llama-server's
// chunks as it sends them.

describe("a Messages request as a chat completion", () => {
  it("system blocks, text, images, thinking, tool calls and their results, in OpenAI's order", () => {
    const chat = chatRequest({
      model: "m",
      max_tokens: 100,
      system: [
        { type: "text", text: "x-anthropic-billing-header: cc_version=2.1; cc_entrypoint=cli; cch=a5145;" },
        { type: "text", text: "You are an agent.", cache_control: { type: "ephemeral" } },
      ],
      messages: [
        { role: "user", content: [{ type: "text", text: "Look:" }, { type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] },
        { role: "assistant", content: [{ type: "thinking", thinking: "Hm.", signature: "" }, { type: "text", text: "I will read it." }, { type: "tool_use", id: "toolu_1", name: "read", input: { path: "a.ts" } }] },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "export {}" }] },
            { type: "tool_result", tool_use_id: "toolu_2", content: "no such file", is_error: true },
            { type: "text", text: "Go on." },
          ],
        },
        { role: "assistant", content: "Done." },
      ],
      metadata: { user_id: "user_abc_session_1" },
      stop_sequences: ["STOP"],
      temperature: 0.2,
      top_k: 5,
      ignore_eos: true,
    });
    expect(chat).toEqual({
      model: "m",
      max_tokens: 100,
      temperature: 0.2,
      top_k: 5,
      ignore_eos: true,
      stop: ["STOP"],
      user: "user_abc_session_1",
      messages: [
        { role: "system", content: "x-anthropic-billing-header: cc_version=2.1; cc_entrypoint=cli; cch=fffff;\nYou are an agent." },
        { role: "user", content: [{ type: "text", text: "Look:" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] },
        { role: "assistant", content: "I will read it.", reasoning_content: "Hm.", tool_calls: [{ id: "toolu_1", type: "function", function: { name: "read", arguments: '{"path":"a.ts"}' } }] },
        { role: "tool", tool_call_id: "toolu_1", content: "export {}" },
        { role: "tool", tool_call_id: "toolu_2", content: "Error:\nno such file" },
        { role: "user", content: "Go on." },
        { role: "assistant", content: "Done." },
      ],
    });
  });

  it.each([
    [{ type: "auto" }, { tool_choice: "auto" }],
    [{ type: "any", disable_parallel_tool_use: true }, { tool_choice: "required", parallel_tool_calls: false }],
    [{ type: "tool", name: "read" }, { tool_choice: { type: "function", function: { name: "read" } } }],
    [{ type: "none" }, { tool_choice: "none" }],
  ])("tool_choice %j", (choice, expected) => {
    const tools = [{ name: "read", description: "Reads a file.", input_schema: { type: "object", properties: { path: { type: "string" } } } }];
    const chat = chatRequest({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "x" }], tools, tool_choice: choice });
    expect(chat).toMatchObject({ tools: [{ type: "function", function: { name: "read", description: "Reads a file.", parameters: tools[0]!.input_schema } }], ...expected });
  });

  it("a stream asks for the prompt's counts with its first chunk and the usage at its end; thinking with a budget", () => {
    const chat = chatRequest({ model: "m", max_tokens: 1, stream: true, thinking: { type: "enabled", budget_tokens: 512 }, messages: [{ role: "user", content: "x" }] });
    expect(chat).toMatchObject({ stream: true, stream_options: { include_usage: true }, timings_per_token: true, thinking_budget_tokens: 512 });
  });

  it("the billing header's stamp is made constant, and nothing else is touched", () => {
    expect(steadyBillingHeader("x-anthropic-billing-header: cc_version=1; cch=0a9Zz; rest")).toBe("x-anthropic-billing-header: cc_version=1; cch=fffff; rest");
    expect(steadyBillingHeader("You are cch=0a9Zz;")).toBe("You are cch=0a9Zz;");
  });
});

describe("a chat completion as a message", () => {
  it("thinking, text and tool calls as blocks; usage from llama-server's timings", () => {
    const answer = {
      id: "chatcmpl-abc",
      model: "ai/m:latest",
      choices: [{ finish_reason: "tool_calls", message: { role: "assistant", reasoning_content: "Think.", content: "Reading.", tool_calls: [{ id: "c1", type: "function", function: { name: "read", arguments: '{"path":"a"}' } }] } }],
      usage: { prompt_tokens: 50, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 40 } },
      timings: { prompt_n: 10, cache_n: 40, predicted_n: 7 },
    };
    expect(message(answer)).toEqual({
      id: "msg_abc",
      type: "message",
      role: "assistant",
      model: "ai/m:latest",
      content: [
        { type: "thinking", thinking: "Think.", signature: "" },
        { type: "text", text: "Reading." },
        { type: "tool_use", id: "c1", name: "read", input: { path: "a" } },
      ],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 10, cache_read_input_tokens: 40, cache_creation_input_tokens: 0, output_tokens: 7 },
    });
  });

  it.each([
    ["length", undefined, "max_tokens", null],
    ["stop", undefined, "end_turn", null],
    ["stop", "STOP", "stop_sequence", "STOP"],
    ["tool_calls", undefined, "tool_use", null],
  ])("finish %s (stopped at %s): %s", (finish, word, reason, sequence) => {
    expect(stopReason(finish, word)).toEqual({ stop_reason: reason, stop_sequence: sequence });
  });
});

describe("a chat stream as Anthropic's events", () => {
  const chunk = (delta: object, extra: object = {}) => `data: ${JSON.stringify({ id: "chatcmpl-x", model: "ai/m", choices: [{ index: 0, finish_reason: null, delta }], ...extra })}`;
  const timings = { timings: { prompt_n: 12, cache_n: 30, predicted_n: 1 } };
  const finish = (reason: string) => `data: ${JSON.stringify({ id: "chatcmpl-x", model: "ai/m", choices: [{ index: 0, finish_reason: reason, delta: {} }] })}`;
  const usage = `data: ${JSON.stringify({ id: "chatcmpl-x", model: "ai/m", choices: [], usage: { prompt_tokens: 42, completion_tokens: 5 }, timings: { prompt_n: 12, cache_n: 30, predicted_n: 5 } })}`;
  const events = (chunks: string[]) => {
    const translator = new MessageEvents((status, text) => ({ type: "error", error: { status, text } }));
    const text = chunks.map((c) => translator.event(c)).join("") + translator.flush();
    return text
      .split("\n\n")
      .filter(Boolean)
      .map((e) => ({ event: /^event: (.*)$/m.exec(e)![1], data: JSON.parse(/^data: (.*)$/m.exec(e)![1]!) as Record<string, any> }));
  };

  it("thinking, then text, then two tool calls: one block after another, each closed before the next", () => {
    const out = events([
      chunk({ role: "assistant", content: null, reasoning_content: "Let me" }, timings),
      chunk({ reasoning_content: " see." }, timings),
      chunk({ content: "Reading" }, timings),
      chunk({ tool_calls: [{ index: 0, id: "c1", type: "function", function: { name: "read", arguments: '{"pa' } }] }, timings),
      chunk({ tool_calls: [{ index: 0, function: { arguments: 'th":"a"}' } }] }, timings),
      chunk({ tool_calls: [{ index: 1, id: "c2", type: "function", function: { name: "run", arguments: "{}" } }] }, timings),
      finish("tool_calls"),
      usage,
      "data: [DONE]",
    ]);
    expect(out.map((e) => `${e.event}${e.data.index ?? ""}${e.data.delta?.type ? `:${e.data.delta.type}` : ""}`)).toEqual([
      "message_start",
      "content_block_start0",
      "content_block_delta0:thinking_delta",
      "content_block_delta0:thinking_delta",
      "content_block_delta0:signature_delta",
      "content_block_stop0",
      "content_block_start1",
      "content_block_delta1:text_delta",
      "content_block_stop1",
      "content_block_start2",
      "content_block_delta2:input_json_delta",
      "content_block_delta2:input_json_delta",
      "content_block_stop2",
      "content_block_start3",
      "content_block_delta3:input_json_delta",
      "content_block_stop3",
      "message_delta",
      "message_stop",
    ]);
    expect(out[0]!.data.message).toMatchObject({ id: "msg_x", model: "ai/m", usage: { input_tokens: 12, cache_read_input_tokens: 30, cache_creation_input_tokens: 0, output_tokens: 0 } });
    expect(out[9]!.data.content_block).toEqual({ type: "tool_use", id: "c1", name: "read", input: {} });
    expect(out.at(-2)!.data).toEqual({ type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { input_tokens: 12, cache_read_input_tokens: 30, cache_creation_input_tokens: 0, output_tokens: 5 } });
  });

  it("an answer whose every token ended mid-character: the start, with the counts from the end, and no block", () => {
    const out = events([finish("length"), usage, "data: [DONE]"]);
    expect(out.map((e) => e.event)).toEqual(["message_start", "message_delta", "message_stop"]);
    expect(out[0]!.data.message.usage).toEqual({ input_tokens: 12, cache_read_input_tokens: 30, cache_creation_input_tokens: 0, output_tokens: 0 });
  });

  it("pings pass as Anthropic's; an error mid-stream is Anthropic's error event, and nothing follows it", () => {
    const out = events([chunk({ content: "a" }, timings), ": ping", `data: ${JSON.stringify({ error: { code: 500, message: "boom", type: "server_error" } })}`, "data: [DONE]"]);
    expect(out.map((e) => e.event)).toEqual(["message_start", "content_block_start", "content_block_delta", "ping", "error"]);
    expect(out.at(-1)!.data).toEqual({ type: "error", error: { status: 500, text: "boom" } });
  });

  it("a stream cut after its finish still ends as a message", () => {
    const out = events([chunk({ content: "a" }, timings), finish("stop")]);
    expect(out.map((e) => e.event).slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    expect(out.at(-2)!.data.delta).toEqual({ stop_reason: "end_turn", stop_sequence: null });
  });
});

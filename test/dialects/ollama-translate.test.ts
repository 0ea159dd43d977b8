import { describe, expect, it } from "vitest";
import { pullLines } from "../../src/dialects/ollama/models.ts";
import { toNdjson } from "../../src/dialects/ollama/stream.ts";
import * as t from "../../src/dialects/ollama/translate.ts";

// The Ollama translation is pure: bodies and chunks in, bodies and lines out.

const PNG = "iVBORw0KGgoAAAANSUhEUg";
const clock: t.Clock = { startedAt: 1000, loadedAt: 1250, now: 2000 };

describe("requests", () => {
  it.each<[string, t.OllamaOptions, Record<string, unknown>]>([
    ["sampling options keep their names", { temperature: 0.2, top_p: 0.9, top_k: 40, min_p: 0.05, seed: 7, repeat_penalty: 1.1, repeat_last_n: 64 }, { temperature: 0.2, top_p: 0.9, top_k: 40, min_p: 0.05, seed: 7, repeat_penalty: 1.1, repeat_last_n: 64 }],
    ["num_predict is max_tokens", { num_predict: 12 }, { max_tokens: 12 }],
    ["a negative num_predict means no limit", { num_predict: -1 }, {}],
    ["one stop string becomes a list", { stop: "END" }, { stop: ["END"] }],
    ["num_keep is n_keep", { num_keep: 5 }, { n_keep: 5 }],
    ["load-time options are not request fields", { num_ctx: 4096, num_gpu: 99, num_thread: 8, use_mmap: false }, {}],
    ["penalties and mirostat", { presence_penalty: 0.5, frequency_penalty: 0.3, mirostat: 2, mirostat_tau: 5, mirostat_eta: 0.1, typical_p: 0.9 }, { presence_penalty: 0.5, frequency_penalty: 0.3, mirostat: 2, mirostat_tau: 5, mirostat_eta: 0.1, typical_p: 0.9 }],
  ])("options: %s", (_, options, fields) => {
    expect(t.samplingFields(options)).toEqual(fields);
  });

  it.each<[string, unknown, unknown]>([
    ["json", "json", { type: "json_object" }],
    ["a schema", { type: "object", properties: { a: { type: "integer" } } }, { type: "json_schema", json_schema: { name: "response", schema: { type: "object", properties: { a: { type: "integer" } } } } }],
    ["none", undefined, undefined],
    ["empty", "", undefined],
  ])("format: %s", (_, format, expected) => {
    expect(t.responseFormat(format)).toEqual(expected);
  });

  it.each<[string, boolean | string | undefined, Record<string, unknown>]>([
    ["on", true, { chat_template_kwargs: { enable_thinking: true } }],
    ["off", false, { chat_template_kwargs: { enable_thinking: false } }],
    ["a level", "high", { chat_template_kwargs: { enable_thinking: true, reasoning_effort: "high" }, reasoning_effort: "high" }],
    ["unset", undefined, {}],
  ])("think: %s", (_, think, fields) => {
    expect(t.thinkFields(think)).toEqual(fields);
  });

  it("images become image parts with a data URL of their type", () => {
    const [message] = t.chatMessages([{ role: "user", content: "what is this?", images: [PNG, "/9j/4AAQ", "AAAA"] }]);
    expect(message!.content).toEqual([
      { type: "text", text: "what is this?" },
      { type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } },
      { type: "image_url", image_url: { url: "data:image/jpeg;base64,/9j/4AAQ" } },
      { type: "image_url", image_url: { url: "data:image/jpeg;base64,AAAA" } },
    ]);
  });

  it("tool calls get ids and JSON arguments; tool results are matched to them by name", () => {
    const messages = t.chatMessages([
      { role: "user", content: "weather in Paris and Rome?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { function: { name: "weather", arguments: { city: "Paris" } } },
          { function: { name: "time", arguments: { city: "Rome" } } },
        ],
      },
      { role: "tool", content: "12:00", tool_name: "time" },
      { role: "tool", content: "sunny", tool_name: "weather" },
    ]);
    expect(messages[1]!.tool_calls).toEqual([
      { id: "call_1_0", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } },
      { id: "call_1_1", type: "function", function: { name: "time", arguments: '{"city":"Rome"}' } },
    ]);
    expect(messages[2]).toMatchObject({ role: "tool", content: "12:00", tool_call_id: "call_1_1" });
    expect(messages[3]).toMatchObject({ role: "tool", content: "sunny", tool_call_id: "call_1_0" });
  });

  it("a tool result with neither id nor name answers the earliest open call; thinking goes back as reasoning", () => {
    const messages = t.chatMessages([
      { role: "assistant", thinking: "hmm", content: "", tool_calls: [{ id: "abc", function: { name: "f", arguments: "{}" } }] },
      { role: "tool", content: "done" },
    ]);
    expect(messages[0]).toMatchObject({ reasoning_content: "hmm", tool_calls: [{ id: "abc", function: { arguments: "{}" } }] });
    expect(messages[1]!.tool_call_id).toBe("abc");
  });

  it("a chat request carries tools, format, options and think; a streamed one asks for usage", () => {
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "object" } } }];
    expect(t.chatRequest({ model: "m", messages: [{ role: "user", content: "x" }], tools, format: "json", options: { num_predict: 3 }, think: false }, true)).toEqual({
      model: "m",
      messages: [{ role: "user", content: "x" }],
      tools,
      response_format: { type: "json_object" },
      max_tokens: 3,
      chat_template_kwargs: { enable_thinking: false },
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it("generate is a chat turn (with its system prompt), or with raw the prompt as it is", () => {
    expect(t.generateRequest({ model: "m", prompt: "hi", system: "be brief", images: [PNG] }, false)).toEqual({
      endpoint: "chat/completions",
      body: {
        model: "m",
        messages: [
          { role: "system", content: "be brief" },
          { role: "user", content: [{ type: "text", text: "hi" }, { type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } }] },
        ],
        stream: false,
      },
    });
    expect(t.generateRequest({ model: "m", prompt: "hi", raw: true, options: { seed: 1 } }, false)).toEqual({ endpoint: "completions", body: { model: "m", prompt: "hi", seed: 1, stream: false } });
  });
});

describe("answers", () => {
  const timings = { cache_n: 6, prompt_n: 10, prompt_ms: 5, predicted_n: 4, predicted_ms: 20 };

  it("a chat answer with Ollama's counters in nanoseconds; the prompt counted whole, its cached part apart", () => {
    const answer = t.chatAnswer("m", { choices: [{ message: { role: "assistant", content: "hi", reasoning_content: "think" }, finish_reason: "stop" }], timings }, clock);
    expect(answer).toEqual({
      model: "m",
      created_at: new Date(2000).toISOString(),
      message: { role: "assistant", content: "hi", thinking: "think" },
      done: true,
      done_reason: "stop",
      total_duration: 1_000_000_000,
      load_duration: 250_000_000,
      prompt_eval_count: 16,
      prompt_eval_cached_count: 6,
      prompt_eval_duration: 5_000_000,
      eval_count: 4,
      eval_duration: 20_000_000,
    });
  });

  it("tool calls come back with their arguments as objects", () => {
    const answer = t.chatAnswer("m", { choices: [{ message: { content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: '{"a":1}' } }] }, finish_reason: "tool_calls" }] }, clock);
    expect(answer.message).toEqual({ role: "assistant", content: "", tool_calls: [{ id: "c1", function: { index: 0, name: "f", arguments: { a: 1 } } }] });
    expect(answer.done_reason).toBe("stop");
  });

  it("a generate answer from a raw completion, cut at the length limit", () => {
    expect(t.generateAnswer("m", { choices: [{ text: "abc", finish_reason: "length" }], usage: { prompt_tokens: 3, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 1 } } }, clock)).toMatchObject({
      response: "abc",
      done: true,
      done_reason: "length",
      prompt_eval_count: 3,
      prompt_eval_cached_count: 1,
      eval_count: 2,
    });
  });
});

describe("streams", () => {
  const encode = (text: string) => new TextEncoder().encode(text);
  async function translate(kind: "chat" | "generate", pieces: string[]): Promise<Record<string, unknown>[]> {
    const source = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const piece of pieces) controller.enqueue(encode(piece));
        controller.close();
      },
    });
    const text = await new Response(source.pipeThrough(toNdjson(kind, "m", () => clock))).text();
    expect(text.endsWith("\n")).toBe(true);
    return text.trimEnd().split("\n").map((line) => JSON.parse(line));
  }
  const sse = (chunk: object) => `data: ${JSON.stringify(chunk)}\n\n`;
  const delta = (d: object, finish: string | null = null) => sse({ choices: [{ index: 0, delta: d, finish_reason: finish }] });

  it("one line per piece of text, whatever the network's cuts; then done with the counters", async () => {
    const whole = [
      delta({ role: "assistant", content: null }),
      delta({ content: "Hel" }),
      delta({ content: "lo" }),
      delta({}, "length"),
      sse({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 2 }, timings: { cache_n: 3, prompt_n: 2, prompt_ms: 1, predicted_n: 2, predicted_ms: 3 } }),
      "data: [DONE]\n\n",
    ].join("");
    const cuts = [whole.slice(0, 7), whole.slice(7, 100), whole.slice(100, 101), whole.slice(101)];
    const lines = await translate("chat", cuts);
    expect(lines.map((l) => (l.message as { content: string }).content)).toEqual(["Hel", "lo", ""]);
    expect(lines.at(-1)).toMatchObject({ done: true, done_reason: "length", prompt_eval_count: 5, prompt_eval_cached_count: 3, eval_count: 2, eval_duration: 3_000_000 });
    expect(lines.slice(0, -1).every((l) => l.done === false)).toBe(true);
  });

  it("thinking pieces stream as thinking; generate lines carry response", async () => {
    const lines = await translate("generate", [delta({ reasoning_content: "hm" }), delta({ content: "ok" }), delta({}, "stop"), "data: [DONE]\n\n"]);
    expect(lines).toEqual([
      { model: "m", created_at: expect.any(String), response: "", thinking: "hm", done: false },
      { model: "m", created_at: expect.any(String), response: "ok", done: false },
      expect.objectContaining({ response: "", done: true, done_reason: "stop" }),
    ]);
  });

  it("tool calls in pieces are sent whole in the last line", async () => {
    const lines = await translate("chat", [
      delta({ tool_calls: [{ index: 0, id: "c1", type: "function", function: { name: "weather", arguments: "" } }] }),
      delta({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
      delta({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
      delta({}, "tool_calls"),
      "data: [DONE]\n\n",
    ]);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.message).toEqual({ role: "assistant", content: "", tool_calls: [{ id: "c1", function: { index: 0, name: "weather", arguments: { city: "Paris" } } }] });
  });

  it("an error event ends the stream with Ollama's error line, and no done", async () => {
    const lines = await translate("chat", [delta({ content: "a" }), sse({ error: { message: "runner died", type: "server_error" } })]);
    expect(lines).toEqual([expect.objectContaining({ done: false }), { error: "runner died" }]);
  });
});

describe("pull progress", () => {
  it.each([
    [{ type: "progress" as const, message: "", total: 10, layer: { id: `sha256:${"ab".repeat(32)}`, size: 10, current: 4 }, mode: "pull" as const }, [{ status: "pulling abababababab", digest: `sha256:${"ab".repeat(32)}`, total: 10, completed: 4 }]],
    [{ type: "success" as const, message: "Model pulled successfully", mode: "pull" as const }, [{ status: "verifying sha256 digest" }, { status: "writing manifest" }, { status: "success" }]],
    [{ type: "error" as const, message: "registry said no", mode: "pull" as const }, [{ error: "registry said no" }]],
  ])("%o", (event, lines) => {
    expect(pullLines(event)).toEqual(lines);
  });
});

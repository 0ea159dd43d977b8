import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHAT_MODEL, misfit, parsedMisfit, ROOM, TIME_PARAMETERS, TOOL_PARAMETERS, WEATHER_PARAMETERS } from "../support/chat-model.ts";
import { startStack, type Stack } from "./harness.ts";

// Tool calls end to end through the official clients (openai, @anthropic-ai/sdk, ollama), the
// server under Bun, one real llama-server runner for the whole file. The model's chat template is
// Qwen2.5's (tools in the system prompt, calls as <tool_call>{"name", "arguments"}</tool_call>);
// llama-server (--jinja) parses its calls into each API's shape, with arguments held to the tool's
// schema by its grammar. Every call is checked: a known tool, arguments that fit its parameters.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: [], shaped: { "ai/chat": CHAT_MODEL } });
});
afterAll(async () => {
  await stack?.stop();
});

const ask = [{ role: "user" as const, content: "What is the weather in Paris?" }];
const functions = [
  { type: "function" as const, function: { name: "get_weather", description: "The weather in a city", parameters: WEATHER_PARAMETERS } },
  { type: "function" as const, function: { name: "get_time", description: "The time in a zone", parameters: TIME_PARAMETERS } },
];
type Call = { name: string; arguments: string };

/** Why a call is wrong (an unknown tool, or arguments that do not fit), or undefined. */
const callMisfit = ({ name, arguments: args }: Call) => (TOOL_PARAMETERS[name] ? parsedMisfit(TOOL_PARAMETERS[name], args) : `unknown tool ${name}`);

describe("OpenAI chat completions", () => {
  const openai = () => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });

  it('tool_choice "required": parsed tool_calls whose arguments fit', async () => {
    const completion = await openai().chat.completions.create({ model: "ai/chat", messages: ask, tools: functions, tool_choice: "required", max_tokens: ROOM, seed: 1 });
    const { message, finish_reason } = completion.choices[0]!;
    expect(finish_reason).toBe("tool_calls");
    const calls = (message.tool_calls ?? []).map((call) => (call as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function);
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.map(callMisfit)).toEqual(calls.map(() => undefined));
  });

  it("a named function, streamed: every call is to it, and its arguments fit", async () => {
    const calls = await streamedCalls(openai(), { tool_choice: { type: "function", function: { name: "get_time" } }, seed: 2 });
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.map((call) => [call.name, misfit(TIME_PARAMETERS, JSON.parse(call.arguments))])).toEqual(calls.map(() => ["get_time", undefined]));
  });

  it("a named function, not streamed, whichever of the two is named", async () => {
    for (const [name, seed] of [["get_weather", 3], ["get_time", 4], ["get_weather", 5]] as const) {
      const completion = await openai().chat.completions.create({ model: "ai/chat", messages: ask, tools: functions, tool_choice: { type: "function", function: { name } }, max_tokens: ROOM, seed });
      const calls = (completion.choices[0]!.message.tool_calls ?? []).map((call) => (call as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function);
      expect(calls.length).toBeGreaterThan(0);
      expect(calls.map((call) => [call.name, callMisfit(call)])).toEqual(calls.map(() => [name, undefined]));
    }
  });

  it('tool_choice "required", streamed', async () => {
    const calls = await streamedCalls(openai(), { tool_choice: "required", seed: 6 });
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.map(callMisfit)).toEqual(calls.map(() => undefined));
  });
});

/** The tool calls of a streamed chat completion, put together from their pieces. */
async function streamedCalls(client: OpenAI, extra: Partial<OpenAI.Chat.ChatCompletionCreateParamsStreaming>): Promise<Call[]> {
  const stream = await client.chat.completions.create({ model: "ai/chat", messages: ask, tools: functions, max_tokens: ROOM, stream: true, ...extra });
  const calls: Call[] = [];
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    finish ??= chunk.choices[0]?.finish_reason;
    for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
      const call = (calls[delta.index] ??= { name: "", arguments: "" });
      call.name += delta.function?.name ?? "";
      call.arguments += delta.function?.arguments ?? "";
    }
  }
  expect(finish).toBe("tool_calls");
  return calls;
}

describe("Anthropic messages", () => {
  const anthropic = () => new Anthropic({ baseURL: stack.url, apiKey: "unused", maxRetries: 0 });
  const tools: Anthropic.Tool[] = [
    { name: "get_weather", description: "The weather in a city", input_schema: WEATHER_PARAMETERS as Anthropic.Tool.InputSchema },
    { name: "get_time", description: "The time in a zone", input_schema: TIME_PARAMETERS as Anthropic.Tool.InputSchema },
  ];
  const request = (name: string) => ({ model: "ai/chat", max_tokens: ROOM, messages: ask, tools, tool_choice: { type: "tool" as const, name } });
  const uses = (message: Anthropic.Message) => message.content.filter((block): block is Anthropic.ToolUseBlock => block.type === "tool_use");

  it('tool_choice {type: "tool"}: tool_use blocks for that tool, with an input that fits', async () => {
    const message = await anthropic().messages.create(request("get_weather"));
    expect(message.stop_reason).toBe("tool_use");
    expect(uses(message).length).toBeGreaterThan(0);
    expect(uses(message).map((use) => [use.name, misfit(WEATHER_PARAMETERS, use.input)])).toEqual(uses(message).map(() => ["get_weather", undefined]));
  });

  it("the same, streamed", async () => {
    const stream = anthropic().messages.stream(request("get_time"));
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe("tool_use");
    expect(uses(message).length).toBeGreaterThan(0);
    expect(uses(message).map((use) => [use.name, misfit(TIME_PARAMETERS, use.input)])).toEqual(uses(message).map(() => ["get_time", undefined]));
  });
});

describe("the Responses API", () => {
  const openai = () => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
  const tools: OpenAI.Responses.FunctionTool[] = functions.map(({ function: f }) => ({ type: "function", name: f.name, description: f.description, parameters: f.parameters, strict: true }));
  const calls = (response: OpenAI.Responses.Response) => response.output.filter((item): item is OpenAI.Responses.ResponseFunctionToolCall => item.type === "function_call");

  it('function tools, tool_choice "required": function_call items whose arguments fit', async () => {
    const response = await openai().responses.create({ model: "ai/chat", input: "Weather in Paris?", tools, tool_choice: "required", max_output_tokens: ROOM });
    expect(calls(response).length).toBeGreaterThan(0);
    expect(calls(response).map(callMisfit)).toEqual(calls(response).map(() => undefined));
  });

  it("a named function: every call is to it", async () => {
    const response = await openai().responses.create({ model: "ai/chat", input: "Time?", tools, tool_choice: { type: "function", name: "get_time" }, max_output_tokens: ROOM });
    expect(calls(response).length).toBeGreaterThan(0);
    expect(calls(response).map((call) => [call.name, callMisfit(call)])).toEqual(calls(response).map(() => ["get_time", undefined]));
  });
});

describe("Ollama", () => {
  const ollama = () => new Ollama({ host: stack.url });
  type OllamaCall = { function: { name: string; arguments: Record<string, unknown> } };
  const fit = (calls: OllamaCall[]) => calls.map((call) => (TOOL_PARAMETERS[call.function.name] ? misfit(TOOL_PARAMETERS[call.function.name]!, call.function.arguments) : `unknown tool ${call.function.name}`));

  it("tools: tool_calls with arguments (an object) that fit", async () => {
    const answer = await ollama().chat({ model: "ai/chat", messages: ask, tools: functions, stream: false, options: { num_predict: ROOM, seed: 7 } });
    const calls = (answer.message.tool_calls ?? []) as OllamaCall[];
    expect(calls.length).toBeGreaterThan(0);
    expect(fit(calls)).toEqual(calls.map(() => undefined));
  });

  it("tools, streamed: the calls come whole on the last line", async () => {
    let last: { done: boolean; message: { tool_calls?: OllamaCall[] } } | undefined;
    for await (const part of await ollama().chat({ model: "ai/chat", messages: ask, tools: functions, stream: true, options: { num_predict: ROOM, seed: 8 } })) last = part as typeof last;
    const calls = last?.message.tool_calls ?? [];
    expect(last?.done).toBe(true);
    expect(calls.length).toBeGreaterThan(0);
    expect(fit(calls)).toEqual(calls.map(() => undefined));
  });
});

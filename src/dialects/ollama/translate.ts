// Ollama's /api bodies to and from what llama-server speaks (OpenAI chat, completions and
// embeddings). Pure: a body in, a body out; a chunk in, a line out. Table-tested without a process.

import type { OllamaChat, OllamaGenerate, OllamaMessage, OllamaOptions, OpenAIAnswer, OpenAIMessage, OpenAIToolCall, Timings, Usage } from "./shapes.ts";

export type { OllamaChat, OllamaGenerate, OllamaMessage, OllamaOptions, OpenAIAnswer } from "./shapes.ts";

// Sampling options llama-server takes under the same name (its /v1 endpoints accept its own
// sampling fields beside OpenAI's).
const SAME_NAME = [
  "temperature", "top_p", "top_k", "min_p", "typical_p", "seed", "stop", "repeat_penalty", "repeat_last_n",
  "presence_penalty", "frequency_penalty", "mirostat", "mirostat_tau", "mirostat_eta",
] as const;

/**
 * Ollama `options` as request fields. `num_predict` is `max_tokens` (negative: no limit);
 * `num_keep` is `n_keep`. Load-time options (num_ctx, num_gpu, num_thread...) are not request
 * fields: the caller applies num_ctx to the model's settings; the rest are the runner's business.
 */
export function samplingFields(options: OllamaOptions = {}): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const name of SAME_NAME) if (options[name] !== undefined) fields[name] = options[name];
  if (typeof options.stop === "string") fields.stop = [options.stop];
  const predict = options.num_predict;
  if (typeof predict === "number" && predict >= 0) fields.max_tokens = predict;
  if (options.num_keep !== undefined) fields.n_keep = options.num_keep;
  return fields;
}

/** `format`: "json" or a JSON schema, as OpenAI's `response_format`. */
export function responseFormat(format: unknown): Record<string, unknown> | undefined {
  if (format === undefined || format === null || format === "") return undefined;
  if (format === "json") return { type: "json_object" };
  if (typeof format === "object") return { type: "json_schema", json_schema: { name: "response", schema: format } };
  return undefined;
}

/** `think`: on or off, or a level ("high", "medium", "low") for models that take one. */
export function thinkFields(think: boolean | string | undefined): Record<string, unknown> {
  if (think === undefined) return {};
  if (typeof think === "string") return { chat_template_kwargs: { enable_thinking: true, reasoning_effort: think }, reasoning_effort: think };
  return { chat_template_kwargs: { enable_thinking: think } };
}

/** The MIME type of base64 image data from its first bytes (Ollama sends bare base64). */
export function imageMime(base64: string): string {
  if (base64.startsWith("iVBORw0KGgo")) return "image/png";
  if (base64.startsWith("/9j/")) return "image/jpeg";
  if (base64.startsWith("R0lGOD")) return "image/gif";
  if (base64.startsWith("UklGR")) return "image/webp";
  return "image/jpeg";
}

/**
 * An Ollama image as a chat part's URL. Base64 has no colon: anything with one (a data: URL, or a
 * URL) is passed on as it is, to be judged as any media URL (see inference/body-policy.ts).
 */
const asDataUrl = (image: string) => (image.includes(":") ? image : `data:${imageMime(image)};base64,${image}`);

function content(text: string, images: string[] | undefined): unknown {
  if (!images?.length) return text;
  return [...(text ? [{ type: "text", text }] : []), ...images.map((image) => ({ type: "image_url", image_url: { url: asDataUrl(image) } }))];
}

const callId = (turn: number, index: number) => `call_${turn}_${index}`;

/**
 * Ollama messages as OpenAI's. Ollama's tool calls carry arguments as an object and often no id;
 * a tool result names its tool (`tool_name`) rather than a call id: each result is matched to the
 * earliest unanswered call of that name (else the earliest unanswered call).
 */
export function chatMessages(messages: OllamaMessage[]): Record<string, unknown>[] {
  const unanswered: { id: string; name: string }[] = [];
  return messages.map((message, turn) => {
    const out: Record<string, unknown> = { role: message.role, content: content(message.content ?? "", message.images) };
    if (message.thinking) out.reasoning_content = message.thinking;
    if (message.tool_calls?.length) {
      out.tool_calls = message.tool_calls.map((call, index) => {
        const id = call.id ?? callId(turn, index);
        unanswered.push({ id, name: call.function.name });
        const args = call.function.arguments;
        return { id, type: "function", function: { name: call.function.name, arguments: typeof args === "string" ? args : JSON.stringify(args ?? {}) } };
      });
    }
    if (message.role === "tool") {
      const at = message.tool_call_id
        ? unanswered.findIndex((call) => call.id === message.tool_call_id)
        : Math.max(unanswered.findIndex((call) => call.name === message.tool_name), 0);
      const [answered] = at >= 0 ? unanswered.splice(at, 1) : [];
      const id = message.tool_call_id ?? answered?.id;
      if (id) out.tool_call_id = id;
    }
    return out;
  });
}

/** /api/chat as /v1/chat/completions. */
export function chatRequest(body: OllamaChat, stream: boolean): Record<string, unknown> {
  const format = responseFormat(body.format);
  return {
    model: body.model,
    messages: chatMessages(body.messages ?? []),
    ...(body.tools?.length ? { tools: body.tools } : {}),
    ...(format ? { response_format: format } : {}),
    ...samplingFields(body.options),
    ...thinkFields(body.think),
    ...(body.logprobs ? { logprobs: true, ...(body.top_logprobs ? { top_logprobs: body.top_logprobs } : {}) } : {}),
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
  };
}

/**
 * /api/generate: the model's chat template applied to the prompt (and `system`), as Ollama does,
 * so as a chat with one user turn; `raw` sends the prompt as it is, to /v1/completions.
 */
export function generateRequest(body: OllamaGenerate, stream: boolean): { endpoint: "chat/completions" | "completions"; body: Record<string, unknown> } {
  if (body.raw) {
    const format = responseFormat(body.format);
    return {
      endpoint: "completions",
      body: { model: body.model, prompt: body.prompt ?? "", ...(format ? { response_format: format } : {}), ...samplingFields(body.options), stream, ...(stream ? { stream_options: { include_usage: true } } : {}) },
    };
  }
  const messages: OllamaMessage[] = [
    ...(body.system ? [{ role: "system", content: body.system }] : []),
    { role: "user", content: body.prompt ?? "", ...(body.images?.length ? { images: body.images } : {}) },
  ];
  const { format, options, think, model } = body;
  return { endpoint: "chat/completions", body: chatRequest({ model, messages, format, ...(options ? { options } : {}), ...(think !== undefined ? { think } : {}) }, stream) };
}

export type Clock = { startedAt: number; loadedAt: number; now: number };

/**
 * What Ollama reports at the end of an answer, durations in nanoseconds, from llama-server's timings.
 * As Ollama itself does since it runs llama-server (0.30): `prompt_eval_count` is the whole prompt,
 * cached tokens included (what clients size a context by), `prompt_eval_cached_count` the part taken
 * from the cache; `prompt_eval_duration` is the time spent on the rest.
 */
export function counters(usage: Usage | undefined, timings: Timings | undefined, clock: Clock): Record<string, number> {
  const ns = (ms: number | undefined) => Math.round((ms ?? 0) * 1e6);
  return {
    total_duration: ns(clock.now - clock.startedAt),
    load_duration: ns(clock.loadedAt - clock.startedAt),
    prompt_eval_count: timings ? (timings.cache_n ?? 0) + (timings.prompt_n ?? 0) : (usage?.prompt_tokens ?? 0),
    prompt_eval_cached_count: timings?.cache_n ?? usage?.prompt_tokens_details?.cached_tokens ?? 0,
    prompt_eval_duration: ns(timings?.prompt_ms),
    eval_count: timings?.predicted_n ?? usage?.completion_tokens ?? 0,
    eval_duration: ns(timings?.predicted_ms),
  };
}

/** OpenAI's finish reasons as Ollama's `done_reason`. */
export function doneReason(finish: string | null | undefined): string {
  if (finish === "length") return "length";
  return "stop"; // stop, tool_calls and anything else end the turn
}

/** OpenAI tool calls (arguments as JSON text) as Ollama's (arguments as an object). */
export function toolCalls(calls: OpenAIToolCall[] | undefined): OllamaMessage["tool_calls"] | undefined {
  if (!calls?.length) return undefined;
  return calls.map((call, index) => ({
    ...(call.id ? { id: call.id } : {}),
    function: { index: call.index ?? index, name: call.function?.name ?? "", arguments: parseArguments(call.function?.arguments) },
  }));
}

function parseArguments(text: string | undefined): Record<string, unknown> {
  if (!text) return {};
  try {
    const value: unknown = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : { value };
  } catch {
    return { arguments: text }; // the model wrote something that is not JSON: kept, not lost
  }
}

function ollamaMessage(message: OpenAIMessage | undefined): OllamaMessage {
  const calls = toolCalls(message?.tool_calls);
  return {
    role: "assistant",
    content: message?.content ?? "",
    ...(message?.reasoning_content ? { thinking: message.reasoning_content } : {}),
    ...(calls ? { tool_calls: calls } : {}),
  };
}

const createdAt = (now: number) => new Date(now).toISOString();

/** A whole /v1/chat/completions answer as /api/chat's. */
export function chatAnswer(model: string, answer: OpenAIAnswer, clock: Clock): Record<string, unknown> {
  const choice = answer.choices?.[0];
  return {
    model,
    created_at: createdAt(clock.now),
    message: ollamaMessage(choice?.message),
    done: true,
    done_reason: doneReason(choice?.finish_reason),
    ...counters(answer.usage, answer.timings, clock),
  };
}

/** A whole answer (chat or raw completion) as /api/generate's. */
export function generateAnswer(model: string, answer: OpenAIAnswer, clock: Clock): Record<string, unknown> {
  const choice = answer.choices?.[0];
  const thinking = choice?.message?.reasoning_content;
  return {
    model,
    created_at: createdAt(clock.now),
    response: choice?.text ?? choice?.message?.content ?? "",
    ...(thinking ? { thinking } : {}),
    done: true,
    done_reason: doneReason(choice?.finish_reason),
    ...counters(answer.usage, answer.timings, clock),
  };
}

/**
 * A streamed answer's state: tool calls arrive in pieces (a name, then argument text in parts)
 * and are sent whole, with the turn's end, as Ollama sends them.
 */
export type StreamState = { finish?: string | null; usage?: Usage; timings?: Timings; calls: OpenAIToolCall[] };

export const newStreamState = (): StreamState => ({ calls: [] });

function collectCalls(state: StreamState, deltas: OpenAIToolCall[]): void {
  for (const delta of deltas) {
    const index = delta.index ?? state.calls.length;
    const call = (state.calls[index] ??= { function: { name: "", arguments: "" } });
    if (delta.id) call.id = delta.id;
    if (delta.function?.name) call.function!.name += delta.function.name;
    if (delta.function?.arguments) call.function!.arguments += delta.function.arguments;
  }
}

/**
 * One SSE chunk of llama-server's stream as the Ollama line to send (or none): text and thinking
 * pieces go out at once; the finish reason, usage and timings are kept for the last line.
 */
export function streamLine(kind: "chat" | "generate", model: string, chunk: OpenAIAnswer, state: StreamState, now: number): Record<string, unknown> | undefined {
  if (chunk.usage) state.usage = chunk.usage;
  if (chunk.timings) state.timings = chunk.timings;
  const choice = chunk.choices?.[0];
  if (!choice) return undefined;
  if (choice.finish_reason) state.finish = choice.finish_reason;
  const delta = choice.delta;
  if (delta?.tool_calls) collectCalls(state, delta.tool_calls);
  const text = choice.text ?? delta?.content ?? "";
  const thinking = delta?.reasoning_content ?? "";
  if (!text && !thinking) return undefined;
  const base = { model, created_at: createdAt(now) };
  if (kind === "generate") return { ...base, response: text, ...(thinking ? { thinking } : {}), done: false };
  return { ...base, message: { role: "assistant", content: text, ...(thinking ? { thinking } : {}) }, done: false };
}

/** The last line of a stream: Ollama's `done` with its reason, counters and durations (and whole tool calls). */
export function finalLine(kind: "chat" | "generate", model: string, state: StreamState, clock: Clock): Record<string, unknown> {
  const base = { model, created_at: createdAt(clock.now) };
  const calls = toolCalls(state.calls);
  const body =
    kind === "generate"
      ? { response: "" }
      : { message: { role: "assistant", content: "", ...(calls ? { tool_calls: calls } : {}) } };
  return { ...base, ...body, done: true, done_reason: doneReason(state.finish), ...counters(state.usage, state.timings, clock) };
}

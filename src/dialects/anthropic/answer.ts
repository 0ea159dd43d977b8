// llama-server's chat completion said as Anthropic's message, whole or as the stream's pieces: the
// content blocks (thinking, text, tool_use, in that order), why it stopped, and the usage from
// llama-server's own counts of the request (`timings`: the prompt tokens it processed, those it
// took from its cache, the tokens it generated). Pure.

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value);

/** Anthropic's usage: the prompt in three parts (processed, read from the cache, written to it: never here), and the output. */
export type MessageUsage = { input_tokens: number; cache_read_input_tokens: number; cache_creation_input_tokens: number; output_tokens: number };

type Timings = { prompt_n?: unknown; cache_n?: unknown; predicted_n?: unknown };
type ChatUsage = { prompt_tokens?: unknown; completion_tokens?: unknown; prompt_tokens_details?: { cached_tokens?: unknown } };

const count = (value: unknown) => (typeof value === "number" && value >= 0 ? value : 0);

/** The usage from a chunk's or an answer's `timings` (llama-server's counts), else from its OpenAI usage. */
export function usageOf(answer: { timings?: Timings; usage?: ChatUsage }): MessageUsage {
  const { timings, usage } = answer;
  if (isObject(timings)) return { input_tokens: count(timings.prompt_n), cache_read_input_tokens: count(timings.cache_n), cache_creation_input_tokens: 0, output_tokens: count(timings.predicted_n) };
  const cached = count(usage?.prompt_tokens_details?.cached_tokens);
  return { input_tokens: count(usage?.prompt_tokens) - cached, cache_read_input_tokens: cached, cache_creation_input_tokens: 0, output_tokens: count(usage?.completion_tokens) };
}

/**
 * Why it stopped: a stop sequence when the text it was asked to stop at ended it (`stopped`, from
 * llama-server's own account when it was asked for one), a tool call, the end of its turn, or the
 * token limit.
 */
export function stopReason(finish: unknown, stopped?: string): { stop_reason: string; stop_sequence: string | null } {
  if (finish === "length") return { stop_reason: "max_tokens", stop_sequence: null };
  if (finish === "tool_calls") return { stop_reason: "tool_use", stop_sequence: null };
  if (stopped) return { stop_reason: "stop_sequence", stop_sequence: stopped };
  return { stop_reason: "end_turn", stop_sequence: null };
}

/** The stop word llama-server says it stopped at (in its `__verbose` account, asked for where stop sequences were given). */
export function stoppingWord(answer: Json): string | undefined {
  const verbose = isObject(answer.__verbose) ? answer.__verbose : undefined;
  return verbose && typeof verbose.stopping_word === "string" && verbose.stopping_word !== "" ? verbose.stopping_word : undefined;
}

/** A tool call's arguments as the input object Anthropic gives (what does not parse as one, {}). */
export function toolInput(argumentsText: unknown): unknown {
  try {
    const input: unknown = JSON.parse(typeof argumentsText === "string" ? argumentsText : "");
    return isObject(input) ? input : {};
  } catch {
    return {};
  }
}

/** A message id from the completion's (`chatcmpl-…`), so one answer keeps one id across dialects' logs. */
export const messageId = (chatId: unknown) => `msg_${typeof chatId === "string" && chatId !== "" ? chatId.replace(/^chatcmpl-/, "") : crypto.randomUUID().replaceAll("-", "")}`;

/** A whole chat completion as Anthropic's message. */
export function message(answer: Json): Json {
  const choice = (Array.isArray(answer.choices) && isObject(answer.choices[0]) ? answer.choices[0] : {}) as Json;
  const said = (isObject(choice.message) ? choice.message : {}) as Json;
  const content: Json[] = [];
  if (typeof said.reasoning_content === "string" && said.reasoning_content !== "") content.push({ type: "thinking", thinking: said.reasoning_content, signature: "" });
  if (typeof said.content === "string" && said.content !== "") content.push({ type: "text", text: said.content });
  for (const call of Array.isArray(said.tool_calls) ? said.tool_calls.filter(isObject) : []) {
    const fn = isObject(call.function) ? call.function : {};
    content.push({ type: "tool_use", id: call.id, name: fn.name, input: toolInput(fn.arguments) });
  }
  return {
    id: messageId(answer.id),
    type: "message",
    role: "assistant",
    content,
    model: answer.model,
    ...stopReason(choice.finish_reason, stoppingWord(answer)),
    usage: usageOf(answer as { timings?: Timings; usage?: ChatUsage }),
  };
}

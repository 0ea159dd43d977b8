import { timingsIn } from "../latency.ts";

// A request's tokens as llama-server counted them, read from the text of its answer's start and end
// (never parsed whole: a stream is not kept). Each dialect's answer says it its own way: `timings`
// (OpenAI chat and completions, Responses), OpenAI's `usage` (embeddings, rerank), Anthropic's
// `usage`: the prompt in three parts (input, read from the cache, written to it), which a stream's
// last usage (`message_delta`, src/dialects/anthropic/stream.ts) repeats beside its output.
// `cached`: the part of the prompt read from llama-server's cache (`cache_n`, OpenAI's
// `cached_tokens`, Anthropic's `cache_read_input_tokens`), the rest having been processed.

export type TokenCounts = { prompt: number; cached: number; completion: number };

const number = (text: string, field: string, which: "first" | "last"): number | undefined => {
  const matches = [...text.matchAll(new RegExp(`"${field}":(\\d+)`, "g"))];
  const match = which === "first" ? matches[0] : matches.at(-1);
  return match ? Number(match[1]) : undefined;
};

export function tokenCounts(text: string): TokenCounts {
  const timings = timingsIn(text);
  if (timings) return { prompt: (timings.cache_n ?? 0) + (timings.prompt_n ?? 0), cached: timings.cache_n ?? 0, completion: timings.predicted_n ?? 0 };
  const promptTokens = number(text, "prompt_tokens", "first");
  if (promptTokens !== undefined) return { prompt: promptTokens, cached: number(text, "cached_tokens", "last") ?? 0, completion: number(text, "completion_tokens", "last") ?? 0 };
  const prompt = ["input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"].reduce((sum, field) => sum + (number(text, field, "last") ?? 0), 0);
  return { prompt, cached: number(text, "cache_read_input_tokens", "last") ?? number(text, "cached_tokens", "last") ?? 0, completion: number(text, "output_tokens", "last") ?? 0 };
}

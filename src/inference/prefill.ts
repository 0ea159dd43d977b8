import { readAtMost } from "../http/body.ts";
import { sseSplitter } from "../http/sse.ts";

// A leader's prompt processed alone before its request (see src/scheduler/prefix-copies.ts): the
// body that asks for it, and the request's answer told the truth about it. llama-server counts the
// request itself as having read from its cache what the prefill processed a moment before; those
// tokens are moved back to "processed" in every count the answer carries (`timings`, OpenAI's and
// the Responses API's cached tokens), so that a client, its usage and our ledger see what
// processing its prompt cost. Only the leaders' answers pass here; each JSON value is parsed and
// only its counts change.

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value);

const utf8 = new TextDecoder();
const encoder = new TextEncoder();

/** The request's body asking for its prompt alone: nothing generated, one JSON answer. */
export function prefillBody(body: Uint8Array<ArrayBuffer>): Uint8Array<ArrayBuffer> {
  const json = JSON.parse(utf8.decode(body)) as Json;
  const { stream: _, stream_options: __, timings_per_token: ___, ...rest } = json;
  return encoder.encode(JSON.stringify({ ...rest, n_predict: 0 }));
}

/** A prefill's answer is one JSON value of counts (it generates no text): no more than this is read of it. */
const ANSWER_LIMIT = 1 << 20;

/** The prompt tokens a prefill's answer processed, read up to ANSWER_LIMIT; 0 for an error, or an answer past it. */
export async function processedIn(answer: Response): Promise<number> {
  if (!answer.ok || !answer.body) return 0;
  const bytes = await readAtMost(answer.body.getReader(), ANSWER_LIMIT, () => new Error(`a prefill answered more than ${ANSWER_LIMIT} bytes`)).catch(() => undefined);
  return bytes ? processedBy(bytes) : 0;
}

/**
 * The prompt tokens a prefill's answer says it processed (0 when it says nothing of them): its
 * `timings`, or, where the endpoint answers without them (llama-server's Responses API), its usage
 * less the part read from the cache.
 */
export function processedBy(answer: Uint8Array): number {
  try {
    const json = JSON.parse(utf8.decode(answer)) as Json;
    const processed = isObject(json.timings) ? json.timings.prompt_n : isObject(json.usage) ? uncached(json.usage) : undefined;
    return typeof processed === "number" && processed > 0 ? processed : 0;
  } catch {
    return 0;
  }
}

/** A usage's prompt tokens not read from the cache (chat's names, or the Responses API's). */
function uncached(usage: Json): number | undefined {
  const prompt = usage.prompt_tokens ?? usage.input_tokens;
  const details = usage.prompt_tokens_details ?? usage.input_tokens_details;
  const cached = isObject(details) && typeof details.cached_tokens === "number" ? details.cached_tokens : 0;
  return typeof prompt === "number" ? prompt - cached : undefined;
}

/** `count` less what the prefill processed, never below 0; and how many were moved. */
const less = (count: unknown, moved: number) => (typeof count === "number" ? Math.max(0, count - moved) : count);

/** One answer (or one stream event's data) with `processed` tokens moved from cached to processed. */
export function counted(json: unknown, processed: number): unknown {
  if (!isObject(json)) return json;
  const out: Json = { ...json };
  if (isObject(json.timings)) {
    const { cache_n: cached, prompt_n: fresh } = json.timings;
    const moved = typeof cached === "number" ? Math.min(cached, processed) : 0;
    out.timings = { ...json.timings, cache_n: less(cached, moved), prompt_n: typeof fresh === "number" ? fresh + moved : fresh };
  }
  if (isObject(json.usage)) out.usage = countedUsage(json.usage, processed);
  // The Responses API's events carry the response, whose usage is the one that counts.
  if (isObject(json.response) && isObject(json.response.usage)) out.response = { ...json.response, usage: countedUsage(json.response.usage, processed) };
  return out;
}

function countedUsage(usage: Json, processed: number): Json {
  const out: Json = { ...usage };
  for (const details of ["prompt_tokens_details", "input_tokens_details"]) {
    const found = usage[details];
    if (isObject(found) && typeof found.cached_tokens === "number") out[details] = { ...found, cached_tokens: less(found.cached_tokens, processed) };
  }
  return out;
}

/** A whole JSON answer counted so; anything that is not JSON as it came. */
export function countedAnswer(answer: Uint8Array<ArrayBuffer>, processed: number): Uint8Array<ArrayBuffer> {
  try {
    return encoder.encode(JSON.stringify(counted(JSON.parse(utf8.decode(answer)), processed)));
  } catch {
    return answer;
  }
}

/** An SSE stream with each event's counts so (events passed on whole; those with no counts as they came). */
export function countedStream(processed: number): TransformStream<Uint8Array, Uint8Array> {
  const split = sseSplitter();
  const event = (text: string) => {
    if (!text.includes('"timings"') && !text.includes('"usage"')) return `${text}\n\n`;
    return `${text
      .split("\n")
      .map((line) => {
        if (!line.startsWith("data:")) return line;
        try {
          return `data: ${JSON.stringify(counted(JSON.parse(line.slice(5)), processed))}`;
        } catch {
          return line;
        }
      })
      .join("\n")}\n\n`;
  };
  return new TransformStream({
    transform(chunk, controller) {
      const out = split.push(chunk).map(event).join("");
      if (out) controller.enqueue(encoder.encode(out));
    },
    flush(controller) {
      const rest = split.rest();
      if (rest) controller.enqueue(encoder.encode(rest));
    },
  });
}

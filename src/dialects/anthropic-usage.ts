// Anthropic's usage as its API reports it, from what llama-server (v0.5.0) sends. Anthropic splits a
// prompt in three: `input_tokens` (processed anew), `cache_read_input_tokens` (read from the cache)
// and `cache_creation_input_tokens` (written to it: always 0 here, llama-server caches as it goes and
// charges nothing for it); their sum is the prompt. It repeats that split in a stream's final
// `message_delta`, beside `output_tokens`, and agents read it there (Claude Code sums it to track its
// context window). llama-server says it in `message_start` only, and leaves that event out when its
// first token ends in the middle of a character (it sends no event until the character is whole):
// its stream then says nothing of the prompt at all, so the runner is asked (see promptUsage).

import type { RunnerQuestions } from "../inference/forward.ts";

/** How a prompt was taken, in Anthropic's words. */
export type InputUsage = { input_tokens: number; cache_read_input_tokens: number; cache_creation_input_tokens: number };

type Usage = Record<string, unknown>;

const count = (value: unknown) => (typeof value === "number" ? value : 0);

/** A usage of llama-server's (message or message_start) as Anthropic's: its cache writes said, 0. */
export function inputUsage(usage: Usage | undefined): InputUsage {
  return { input_tokens: count(usage?.input_tokens), cache_read_input_tokens: count(usage?.cache_read_input_tokens), cache_creation_input_tokens: 0 };
}

/** A whole message of llama-server's with its usage in Anthropic's full shape. */
export function withFullUsage(message: { usage?: Usage }): object {
  return { ...message, usage: { ...inputUsage(message.usage), output_tokens: count(message.usage?.output_tokens) } };
}

/**
 * A prompt's usage where llama-server's stream did not say it, asked of the runner while it generates
 * the answer: the prompt's size from its count_tokens (the template and tokenizer the generation
 * used), its cached part from its slots, where the slots at work that took a prompt of that size all
 * took the same part from the cache. Those are a moment's state, not this request's own record: a
 * generation that has ended (its slot at rest) or two prompts of one size with different cached parts
 * leave the part unknown, and all of the prompt is then counted as input. Without `split` (prompt
 * caches kept per key: the slots' state may be another key's) the part is never looked for.
 */
export async function promptUsage(runner: RunnerQuestions, { split = true } = {}): Promise<InputUsage | undefined> {
  const [size, slots] = await Promise.all([promptSize(runner), split ? slotsAtWork(runner) : []]);
  if (size === undefined) return undefined;
  const parts = new Set(slots.filter((slot) => slot.n_prompt_tokens_cache + slot.n_prompt_tokens_processed === size).map((slot) => slot.n_prompt_tokens_cache));
  const cached = parts.size === 1 ? [...parts][0]! : 0;
  return { input_tokens: size - cached, cache_read_input_tokens: cached, cache_creation_input_tokens: 0 };
}

async function promptSize(runner: RunnerQuestions): Promise<number | undefined> {
  try {
    const answer = await runner.post("/v1/messages/count_tokens");
    const counted = answer.ok ? ((await answer.json()) as { input_tokens?: unknown }).input_tokens : undefined;
    return typeof counted === "number" ? counted : undefined;
  } catch {
    return undefined;
  }
}

/** A slot as llama-server's /slots shows it while it works on a task (its prompt taken in two parts). */
type SlotAtWork = { n_prompt_tokens_cache: number; n_prompt_tokens_processed: number };

async function slotsAtWork(runner: RunnerQuestions): Promise<SlotAtWork[]> {
  try {
    const answer = await runner.get("/slots");
    const slots: unknown = answer.ok ? await answer.json() : [];
    if (!Array.isArray(slots)) return [];
    return (slots as Record<string, unknown>[]).filter(
      (slot): slot is Record<string, unknown> & SlotAtWork =>
        slot.is_processing === true && typeof slot.n_prompt_tokens_cache === "number" && typeof slot.n_prompt_tokens_processed === "number",
    );
  } catch {
    return [];
  }
}

/**
 * A stream of llama-server's /v1/messages made whole: it begins with `message_start` (llama-server's,
 * or where it left that out, one of ours, held until `countPrompt` has asked the runner; a prompt it
 * could not count is said as 0), and its `message_delta` repeats the prompt's usage. Events are
 * passed on whole; all but those two as they came.
 */
export function completeUsage(model: string, countPrompt: () => Promise<InputUsage | undefined>): TransformStream<Uint8Array, Uint8Array> {
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let pending = "";
  let input: InputUsage | undefined;

  async function event(text: string, controller: TransformStreamDefaultController<Uint8Array>): Promise<void> {
    const type = eventType(text);
    if (!input && type === "message_start") {
      const data = dataOf(text) as { message?: { usage?: Usage } } | undefined;
      input = inputUsage(data?.message?.usage);
      if (data?.message) return controller.enqueue(encoder.encode(sse(type, { ...data, message: { ...data.message, usage: { ...input, output_tokens: 0 } } })));
    } else if (!input && type !== undefined && type !== "error") {
      // llama-server left message_start out: no event of its stream will say the prompt's size.
      input = (await countPrompt()) ?? inputUsage(undefined);
      controller.enqueue(encoder.encode(messageStart(model, input)));
    }
    if (input && type === "message_delta") {
      const data = dataOf(text) as { usage?: Usage } | undefined;
      if (data) return controller.enqueue(encoder.encode(sse(type, { ...data, usage: { ...input, ...data.usage } })));
    }
    controller.enqueue(encoder.encode(`${text}\n\n`));
  }

  return new TransformStream({
    async transform(chunk, controller) {
      pending += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = pending.indexOf("\n\n")) >= 0) {
        const text = pending.slice(0, end);
        pending = pending.slice(end + 2);
        await event(text, controller);
      }
    },
    flush(controller) {
      pending += decoder.decode();
      if (pending) controller.enqueue(encoder.encode(pending));
    },
  });
}

/** An SSE event's name (`event:` line), or undefined for a comment (llama-server's pings). */
function eventType(text: string): string | undefined {
  return /^event: ?(.*)$/m.exec(text)?.[1]?.trim();
}

/** An event's data as JSON, or undefined when it is not (it then goes on as it came). */
function dataOf(text: string): Record<string, unknown> | undefined {
  const line = text.split("\n").find((l) => l.startsWith("data:"));
  try {
    const data: unknown = line ? JSON.parse(line.slice(5)) : undefined;
    return typeof data === "object" && data !== null ? (data as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

const sse = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;

function messageStart(model: string, input: InputUsage): string {
  const message = {
    id: `msg_${crypto.randomUUID().replaceAll("-", "")}`,
    type: "message",
    role: "assistant",
    content: [],
    model,
    stop_reason: null,
    stop_sequence: null,
    usage: { ...input, output_tokens: 0 },
  };
  return sse("message_start", { type: "message_start", message });
}

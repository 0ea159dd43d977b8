import { messageId, stopReason, usageOf, type MessageUsage } from "./answer.ts";
import { sseSplitter } from "../../http/sse.ts";

// llama-server's streamed chat completion said as Anthropic's stream: `message_start` (with the
// prompt's counts, which llama-server gives with its first chunk when asked for timings per token),
// then each content block in turn (`content_block_start`, its deltas, `content_block_stop`: thinking,
// text, then each tool call with its input as `input_json_delta`), then `message_delta` (why it
// stopped, and the usage: the prompt's counts and the tokens generated) and `message_stop`. Blocks
// follow one another, never interleave, as Anthropic's do. llama-server's pings become Anthropic's,
// and an error it sends mid-stream Anthropic's error event. The translation is a pure function of
// the chunks (`MessageEvents`); `messageStream` wraps it in a stream of bytes.

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value);

type Block = { kind: "thinking" | "text" | "tool"; index: number };

export const sse = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;

/** Anthropic's error envelope for an error llama-server sent in its stream (OpenAI's shape). */
export type ErrorEnvelope = (status: number, message: string) => object;

export class MessageEvents {
  private started = false;
  private ended = false;
  private open: Block | undefined;
  private nextIndex = 0;
  /** A chat tool call's index -> its block's. */
  private readonly tools = new Map<number, number>();
  private finish: unknown;
  private stopped: string | undefined;
  private usage: MessageUsage | undefined;
  /** The last chunk (its id and model name the message, should none before have started it). */
  private last: Json | undefined;

  private readonly envelope: ErrorEnvelope;

  constructor(envelope: ErrorEnvelope) {
    this.envelope = envelope;
  }

  /** The events for one SSE event of llama-server's (its text without the blank line that ends it). */
  event(text: string): string {
    const data = text
      .split("\n")
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).trim())
      .join("\n");
    if (data === "") return text.startsWith(":") && this.started && !this.ended ? sse("ping", { type: "ping" }) : "";
    if (data === "[DONE]") return this.end();
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      return "";
    }
    return isObject(chunk) ? this.chunk(chunk) : "";
  }

  /** What is left to say once llama-server's stream ends: the end, if it said why it stopped and no [DONE] came. */
  flush(): string {
    return this.finish !== undefined ? this.end() : "";
  }

  private chunk(chunk: Json): string {
    if (isObject(chunk.error)) return this.error(chunk.error);
    this.last = chunk;
    const counted = isObject(chunk.timings) || isObject(chunk.usage);
    if (counted) this.usage = usageOf(chunk as Parameters<typeof usageOf>[0]);
    // message_start says the prompt's counts: it waits for the first chunk that has them (every
    // chunk but the one that only says why it stopped), or for text to say.
    let out = !this.started && (counted || hasContent(chunk)) ? this.start(chunk) : "";
    const verbose = isObject(chunk.__verbose) ? chunk.__verbose : undefined;
    if (verbose && typeof verbose.stopping_word === "string" && verbose.stopping_word !== "") this.stopped = verbose.stopping_word;
    const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
    if (!choice) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    if (typeof delta.reasoning_content === "string" && delta.reasoning_content !== "") out += this.into("thinking") + this.delta(this.open!.index, { type: "thinking_delta", thinking: delta.reasoning_content });
    if (typeof delta.content === "string" && delta.content !== "") out += this.into("text") + this.delta(this.open!.index, { type: "text_delta", text: delta.content });
    for (const call of Array.isArray(delta.tool_calls) ? delta.tool_calls.filter(isObject) : []) out += this.toolCall(call);
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) this.finish = choice.finish_reason;
    return out;
  }

  private start(chunk: Json): string {
    this.started = true;
    // The prompt's counts as llama-server took it; the output so far, none.
    const usage = { ...(this.usage ?? usageOf({})), output_tokens: 0 };
    const message = { id: messageId(chunk.id), type: "message", role: "assistant", content: [], model: chunk.model, stop_reason: null, stop_sequence: null, usage };
    return sse("message_start", { type: "message_start", message });
  }

  /** Makes sure a block of `kind` is the one open (a tool call opens its own: see toolCall). */
  private into(kind: "thinking" | "text"): string {
    if (this.open?.kind === kind) return "";
    const out = this.close();
    this.open = { kind, index: this.nextIndex++ };
    const block = kind === "thinking" ? { type: "thinking", thinking: "" } : { type: "text", text: "" };
    return out + sse("content_block_start", { type: "content_block_start", index: this.open.index, content_block: block });
  }

  private toolCall(call: Json): string {
    const at = typeof call.index === "number" ? call.index : 0;
    const fn = isObject(call.function) ? call.function : {};
    let out = "";
    if (!this.tools.has(at)) {
      out += this.close();
      this.open = { kind: "tool", index: this.nextIndex++ };
      this.tools.set(at, this.open.index);
      const block = { type: "tool_use", id: typeof call.id === "string" ? call.id : `toolu_${crypto.randomUUID().replaceAll("-", "")}`, name: fn.name ?? "", input: {} };
      out += sse("content_block_start", { type: "content_block_start", index: this.open.index, content_block: block });
    }
    if (typeof fn.arguments === "string" && fn.arguments !== "") {
      out += this.delta(this.tools.get(at)!, { type: "input_json_delta", partial_json: fn.arguments });
    }
    return out;
  }

  private delta(index: number, delta: object): string {
    return sse("content_block_delta", { type: "content_block_delta", index, delta });
  }

  /** Closes the open block (a thinking block with its signature first, as Anthropic's API requires one: empty, no local model signs). */
  private close(): string {
    const open = this.open;
    if (!open) return "";
    this.open = undefined;
    const signature = open.kind === "thinking" ? this.delta(open.index, { type: "signature_delta", signature: "" }) : "";
    return signature + sse("content_block_stop", { type: "content_block_stop", index: open.index });
  }

  private end(): string {
    if (this.ended || this.last === undefined) return "";
    this.ended = true;
    const usage = this.usage ?? usageOf({});
    return (this.started ? "" : this.start(this.last)) + this.close() + sse("message_delta", { type: "message_delta", delta: stopReason(this.finish, this.stopped), usage }) + sse("message_stop", { type: "message_stop" });
  }

  private error(error: Json): string {
    this.ended = true;
    const status = typeof error.code === "number" ? error.code : 500;
    return sse("error", this.envelope(status, typeof error.message === "string" ? error.message : "the runner failed"));
  }
}

/** Whether a chunk carries anything of the answer (text, thinking, a tool call). */
function hasContent(chunk: Json): boolean {
  const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
  const delta = choice && isObject(choice.delta) ? choice.delta : {};
  return Boolean(delta.content || delta.reasoning_content || (Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0));
}

/** llama-server's chat SSE bytes in, Anthropic's out (events passed on whole, as they are complete). */
export function messageStream(envelope: ErrorEnvelope): TransformStream<Uint8Array, Uint8Array> {
  const events = new MessageEvents(envelope);
  const split = sseSplitter();
  const encoder = new TextEncoder();
  const send = (text: string, controller: TransformStreamDefaultController<Uint8Array>) => text && controller.enqueue(encoder.encode(text));
  return new TransformStream({
    transform(chunk, controller) {
      send(split.push(chunk).map((event) => events.event(event)).join(""), controller);
    },
    flush(controller) {
      const rest = split.rest().trim();
      send((rest ? events.event(rest) : "") + events.flush(), controller);
    },
  });
}

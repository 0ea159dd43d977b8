import { writeFile } from "node:fs/promises";
import { tinyLlamaGguf, type TinyGgufOptions } from "./tiny-gguf.ts";

// A chat model as heavy to run as the benches need: the tiny chat model's vocabulary and template
// (chat-vocab.ts: byte-level BPE, Qwen2.5's ChatML, so templates, grammars and tool calls work),
// on random weights made wide and deep. Whatever its weights hold, processing a prompt costs what
// its shape costs: the tiny model (2 layers of 64) takes a 4k-token prompt in about 160 ms on two
// cores, where llama-server then processes several prompts side by side in the time of one, and a
// saving in tokens does not show as time. This one's prompts cost seconds, as a real model's do.

export type WideShape = {
  /** The embedding length (llama's hidden width); default 256. */
  width?: number;
  /** Transformer blocks; default 4. */
  layers?: number;
  /** The trained context, in tokens (about a character each with this vocabulary); default 65536. */
  context?: number;
  /** Attention heads; default one per 64 of width (at least 1). */
  heads?: number;
  /** The feed-forward width; default 4x the width. */
  feedForward?: number;
  /** The weights' seed; default 1. */
  seed?: number;
  /** What the model favours (chat-vocab.ts): opening tool calls (default), or short answers. */
  answers?: "tool calls" | "terse";
};

/** The model's options for tinyLlamaGguf and the stacks' `shaped` models (test/inference/harness.ts). */
export function wideChatModel({ width = 256, layers = 4, context = 65_536, heads, feedForward, seed = 1, answers }: WideShape = {}): TinyGgufOptions {
  return {
    vocabulary: "bpe",
    seed,
    embedding: width,
    layers,
    context,
    heads: heads ?? Math.max(1, Math.floor(width / 64)),
    feedForward: feedForward ?? 4 * width,
    ...(answers ? { answers } : {}),
  };
}

/** The model as GGUF v3 bytes (f32: about 4 x (12 x width² x layers + 2 x 320 x width) bytes; 17 MB at the default). */
export const wideChatGguf = (shape: WideShape = {}): Uint8Array => tinyLlamaGguf(wideChatModel(shape));

/** Writes the model to `path`. */
export async function writeWideChatGguf(path: string, shape: WideShape = {}): Promise<void> {
  await writeFile(path, wideChatGguf(shape));
}

// A tiny random-weight llama model in GGUF v3, written from scratch so that tests run the real
// llama-server on a real model without downloading one. Same seed, same bytes.
//
// Shape: byte-level vocabulary of 259 tokens (<unk>, <s>, </s>, <0x00>..<0xFF>), 2 blocks,
// embedding length 64, 4 heads, feed-forward 128, context 512, every tensor f32 (~0.5 MB). Like
// most chat models it declares no pooling type unless asked to (as embedding models do).
// `vocabulary: "bpe"` gives it instead the tokenizer and chat template of chat-vocab.ts.
// Its GGUF writer also writes the tiny multimodal projector (tiny-projector.ts).
import { writeFile } from "node:fs/promises";
import { chatVocabulary, QWEN25_CHAT_TEMPLATE, type Lean } from "./chat-vocab.ts";

export interface TinyGgufOptions {
  /** PRNG seed for the weights; the default gives the same file every time. */
  seed?: number;
  /** Declare `llama.pooling_type` mean, as an embedding model does; default: no pooling key. */
  meanPooling?: boolean;
  /**
   * A reranker instead, shaped as Qwen3-Reranker GGUFs are: architecture `qwen3` (per-head Q/K
   * norms), rank pooling, and a `cls.output` head with two labels ("yes", "no") whose softmax
   * llama-server reports as the relevance score.
   */
  reranker?: boolean;
  /** The shape, for tests of memory estimates; defaults as above. */
  embedding?: number;
  heads?: number;
  /** Grouped-query attention: fewer key/value heads than heads. Default: as many as heads. */
  kvHeads?: number;
  layers?: number;
  feedForward?: number;
  context?: number;
  /**
   * "bytes" (default): the byte tokens above, no chat template. "bpe": a GPT-2-style byte-level BPE
   * vocabulary with merges and Qwen2.5's ChatML template with tool calling (chat-vocab.ts), as
   * models people pull have; llama-server's grammar sampler and tool-call parser accept it. Its
   * context defaults to 4096: one character is about one token, and a tools prompt is long.
   */
  vocabulary?: "bytes" | "bpe";
  /** With "bpe": what the model favours (chat-vocab.ts): opening tool calls (default), or short answers. */
  answers?: "tool calls" | "terse";
  /** Further header fields, as strings (e.g. a decision model's `decision.type`). */
  strings?: Record<string, string>;
}

type Shape = { embd: number; head: number; headKv: number; layer: number; ff: number; ctx: number };

const shapeOf = (o: TinyGgufOptions): Shape => ({
  embd: o.embedding ?? N_EMBD,
  head: o.heads ?? N_HEAD,
  headKv: o.kvHeads ?? o.heads ?? N_HEAD,
  layer: o.layers ?? N_LAYER,
  ff: o.feedForward ?? N_FF,
  ctx: o.context ?? (o.vocabulary === "bpe" ? N_CTX_CHAT : N_CTX),
});

const GGUF_VERSION = 3;
const ALIGNMENT = 32;
const N_EMBD = 64;
const N_HEAD = 4;
const N_FF = 128;
const N_LAYER = 2;
const N_CTX = 512;
const N_CTX_CHAT = 4096;
const POOLING_MEAN = 1;
const POOLING_RANK = 4;
const RERANK_LABELS = ["yes", "no"];

// GGUF metadata value types and the f32 tensor type, from the GGUF specification.
const T_UINT16 = 2;
const T_UINT32 = 4;
const T_INT32 = 5;
export const T_FLOAT32 = 6;
export const T_BOOL = 7;
export const T_STRING = 8;
export const T_ARRAY = 9;
const GGML_TYPE_F32 = 0;

// llama.cpp token types.
const TOKEN_NORMAL_UNKNOWN = 2;
const TOKEN_CONTROL = 3;
const TOKEN_BYTE = 6;

export type MetaValue =
  | { type: typeof T_UINT16 | typeof T_UINT32 | typeof T_INT32 | typeof T_FLOAT32; value: number }
  | { type: typeof T_STRING; value: string }
  | { type: typeof T_BOOL; value: boolean }
  | { type: typeof T_ARRAY; of: typeof T_INT32 | typeof T_FLOAT32; value: number[] }
  | { type: typeof T_ARRAY; of: typeof T_STRING; value: string[] };

export interface Tensor {
  name: string;
  /** GGUF order: dims[0] is the fastest-varying (row length). */
  dims: number[];
  fill: "ones" | "random";
  /** A value that replaces the fill at some flat indices (the fill is still drawn, to keep the rest). */
  set?: (index: number) => number | undefined;
}

export const u32 = (value: number): MetaValue => ({ type: T_UINT32, value });

function vocabulary(): { tokens: string[]; types: number[] } {
  const tokens = ["<unk>", "<s>", "</s>"];
  const types = [TOKEN_NORMAL_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL];
  for (let byte = 0; byte < 256; byte++) {
    tokens.push(`<0x${byte.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(TOKEN_BYTE);
  }
  return { tokens, types };
}

/** The byte vocabulary's keys, as SentencePiece ("llama") models carry them. */
function byteTokenizer(): Array<[string, MetaValue]> {
  const { tokens, types } = vocabulary();
  return [
    ["tokenizer.ggml.model", { type: T_STRING, value: "llama" }],
    ["tokenizer.ggml.tokens", { type: T_ARRAY, of: T_STRING, value: tokens }],
    ["tokenizer.ggml.scores", { type: T_ARRAY, of: T_FLOAT32, value: tokens.map(() => 0) }],
    ["tokenizer.ggml.token_type", { type: T_ARRAY, of: T_INT32, value: types }],
    ["tokenizer.ggml.unknown_token_id", u32(0)],
    ["tokenizer.ggml.bos_token_id", u32(1)],
    ["tokenizer.ggml.eos_token_id", u32(2)],
  ];
}

/** The BPE vocabulary's keys, as Qwen2.5's GGUFs carry them (no BOS added; a turn ends the answer). */
function bpeTokenizer(): Array<[string, MetaValue]> {
  const { tokens, types, merges, endOfText, endOfTurn } = chatVocabulary();
  return [
    ["tokenizer.ggml.model", { type: T_STRING, value: "gpt2" }],
    ["tokenizer.ggml.pre", { type: T_STRING, value: "qwen2" }],
    ["tokenizer.ggml.tokens", { type: T_ARRAY, of: T_STRING, value: tokens }],
    ["tokenizer.ggml.token_type", { type: T_ARRAY, of: T_INT32, value: types }],
    ["tokenizer.ggml.merges", { type: T_ARRAY, of: T_STRING, value: merges }],
    ["tokenizer.ggml.bos_token_id", u32(endOfText)],
    ["tokenizer.ggml.eos_token_id", u32(endOfTurn)],
    ["tokenizer.ggml.padding_token_id", u32(endOfText)],
    ["tokenizer.ggml.add_bos_token", { type: T_BOOL, value: false }],
    ["tokenizer.chat_template", { type: T_STRING, value: QWEN25_CHAT_TEMPLATE }],
  ];
}

const vocabularySize = (options: TinyGgufOptions) => (options.vocabulary === "bpe" ? chatVocabulary().tokens.length : vocabulary().tokens.length);

function metadata(options: TinyGgufOptions, shape: Shape): Array<[string, MetaValue]> {
  const arch = options.reranker ? "qwen3" : "llama";
  const pooling = options.reranker ? POOLING_RANK : options.meanPooling ? POOLING_MEAN : undefined;
  return [
    ["general.architecture", { type: T_STRING, value: arch }],
    ["general.name", { type: T_STRING, value: options.reranker ? "tiny-random-reranker" : "tiny-random-llama" }],
    ["general.alignment", u32(ALIGNMENT)],
    [`${arch}.context_length`, u32(shape.ctx)],
    [`${arch}.embedding_length`, u32(shape.embd)],
    [`${arch}.block_count`, u32(shape.layer)],
    [`${arch}.feed_forward_length`, u32(shape.ff)],
    [`${arch}.attention.head_count`, u32(shape.head)],
    [`${arch}.attention.head_count_kv`, u32(shape.headKv)],
    [`${arch}.rope.dimension_count`, u32(shape.embd / shape.head)],
    [`${arch}.attention.layer_norm_rms_epsilon`, { type: T_FLOAT32, value: 1e-5 }],
    [`${arch}.vocab_size`, u32(vocabularySize(options))],
    ...(pooling === undefined ? [] : [[`${arch}.pooling_type`, u32(pooling)] as [string, MetaValue]]),
    ...(options.reranker ? [[`${arch}.classifier.output_labels`, { type: T_ARRAY, of: T_STRING, value: RERANK_LABELS }] as [string, MetaValue]] : []),
    ...(options.vocabulary === "bpe" ? bpeTokenizer() : byteTokenizer()),
  ];
}

function tensors(vocabSize: number, { embd, head, headKv, layer, ff }: Shape, reranker: boolean): Tensor[] {
  const kvWidth = (embd / head) * headKv;
  const list: Tensor[] = [
    { name: "token_embd.weight", dims: [embd, vocabSize], fill: "random" },
    { name: "output_norm.weight", dims: [embd], fill: "ones" },
    { name: "output.weight", dims: [embd, vocabSize], fill: "random" },
    ...(reranker ? [{ name: "cls.output.weight", dims: [embd, RERANK_LABELS.length], fill: "random" as const }] : []),
  ];
  for (let block = 0; block < layer; block++) {
    const p = `blk.${block}`;
    list.push(
      { name: `${p}.attn_norm.weight`, dims: [embd], fill: "ones" },
      { name: `${p}.attn_q.weight`, dims: [embd, embd], fill: "random" },
      { name: `${p}.attn_k.weight`, dims: [embd, kvWidth], fill: "random" },
      { name: `${p}.attn_v.weight`, dims: [embd, kvWidth], fill: "random" },
      { name: `${p}.attn_output.weight`, dims: [embd, embd], fill: "random" },
      ...(reranker
        ? [
            { name: `${p}.attn_q_norm.weight`, dims: [embd / head], fill: "ones" as const },
            { name: `${p}.attn_k_norm.weight`, dims: [embd / head], fill: "ones" as const },
          ]
        : []),
      { name: `${p}.ffn_norm.weight`, dims: [embd], fill: "ones" },
      { name: `${p}.ffn_gate.weight`, dims: [embd, ff], fill: "random" },
      { name: `${p}.ffn_up.weight`, dims: [embd, ff], fill: "random" },
      { name: `${p}.ffn_down.weight`, dims: [ff, embd], fill: "random" },
    );
  }
  return list;
}

/**
 * Raises the logits of a few tokens by fixed amounts, as an output bias would (llama has none):
 * a few hidden dimensions pass through the blocks untouched (no block reads or writes them), and
 * the output layer weighs them per token. Dimension 0 holds 1 in every embedding: a lean with no
 * `after` weighs it. Each token that some lean follows gets a dimension of its own, 1 in that
 * token's embedding only: the next token's logits see it (a bigram). The rest stays random.
 */
function leanTowards(list: Tensor[], { embd, ff }: Shape, leaning: Lean<number>[]): void {
  const contexts = [...new Set(leaning.flatMap((lean) => (lean.after === undefined ? [] : [lean.after])))];
  const carriers = 1 + contexts.length; // dimensions 0 .. carriers-1
  const carrier = (lean: Lean<number>) => (lean.after === undefined ? 0 : 1 + contexts.indexOf(lean.after));
  const weights = new Map(leaning.map((lean) => [`${lean.token}:${carrier(lean)}`, lean.by]));
  const set = (suffix: string, at: (index: number) => number | undefined) => {
    for (const tensor of list.filter((t) => t.name.endsWith(suffix))) tensor.set = at;
  };
  // [embd, vocab]: token t's embedding is elements t*embd .. t*embd+embd-1.
  set("token_embd.weight", (i) => {
    const [token, dim] = [Math.floor(i / embd), i % embd];
    return dim === 0 ? 1 : dim < carriers ? (contexts[dim - 1] === token ? 1 : 0) : undefined;
  });
  set("attn_norm.weight", (i) => (i < carriers ? 0 : undefined));
  set("ffn_norm.weight", (i) => (i < carriers ? 0 : undefined));
  // [in, out]: output unit j is elements j*in .. j*in+in-1.
  set("attn_output.weight", (i) => (i < embd * carriers ? 0 : undefined));
  set("ffn_down.weight", (i) => (i < ff * carriers ? 0 : undefined));
  set("output.weight", (i) => {
    const [token, dim] = [Math.floor(i / embd), i % embd];
    return dim < carriers ? (weights.get(`${token}:${dim}`) ?? 0) : undefined;
  });
}

/** mulberry32: a small, well-mixed 32-bit PRNG; enough for weights that only need to be fixed. */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Grows as it is written; little-endian throughout, as GGUF is. */
class ByteWriter {
  private buffer = new Uint8Array(1 << 16);
  private view = new DataView(this.buffer.buffer);
  length = 0;

  private reserve(bytes: number): number {
    if (this.length + bytes > this.buffer.length) {
      const next = new Uint8Array(Math.max(this.buffer.length * 2, this.length + bytes));
      next.set(this.buffer);
      this.buffer = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.length;
    this.length += bytes;
    return at;
  }
  u16(value: number): void {
    const at = this.reserve(2); // may replace the view
    this.view.setUint16(at, value, true);
  }
  u32(value: number): void {
    const at = this.reserve(4); // may replace the view
    this.view.setUint32(at, value, true);
  }
  i32(value: number): void {
    const at = this.reserve(4); // may replace the view
    this.view.setInt32(at, value, true);
  }
  u64(value: number): void {
    const at = this.reserve(8);
    this.view.setBigUint64(at, BigInt(value), true);
  }
  f32(value: number): void {
    const at = this.reserve(4); // may replace the view
    this.view.setFloat32(at, value, true);
  }
  bytes(data: Uint8Array): void {
    const at = this.reserve(data.length);
    this.buffer.set(data, at);
  }
  string(value: string): void {
    const data = new TextEncoder().encode(value);
    this.u64(data.length);
    this.bytes(data);
  }
  padTo(alignment: number): void {
    this.reserve((alignment - (this.length % alignment)) % alignment);
  }
  result(): Uint8Array {
    return this.buffer.slice(0, this.length);
  }
}

function writeScalar(out: ByteWriter, type: number, value: number | string | boolean): void {
  if (type === T_STRING) out.string(value as string);
  else if (type === T_BOOL) out.bytes(Uint8Array.of(value ? 1 : 0));
  else if (type === T_UINT16) out.u16(value as number);
  else if (type === T_UINT32) out.u32(value as number);
  else if (type === T_INT32) out.i32(value as number);
  else out.f32(value as number);
}

function writeMeta(out: ByteWriter, key: string, meta: MetaValue): void {
  out.string(key);
  out.u32(meta.type);
  if (meta.type !== T_ARRAY) return writeScalar(out, meta.type, meta.value);
  out.u32(meta.of);
  out.u64(meta.value.length);
  for (const item of meta.value) writeScalar(out, meta.of, item);
}

const elementCount = (tensor: Tensor) => tensor.dims.reduce((a, b) => a * b, 1);
const alignUp = (n: number) => Math.ceil(n / ALIGNMENT) * ALIGNMENT;

function writeTensorData(out: ByteWriter, tensor: Tensor, random: () => number): void {
  // Small uniform weights, scaled by fan-in, keep activations finite through both blocks.
  const scale = 1 / Math.sqrt(tensor.dims[0] ?? 1);
  for (let i = 0; i < elementCount(tensor); i++) {
    const value = tensor.fill === "ones" ? 1 : (random() * 2 - 1) * scale;
    out.f32(tensor.set?.(i) ?? value);
  }
}

/** One GGUF file: its metadata, then its tensors' infos and data (drawn from `random` in order). */
export function writeGguf(meta: Array<[string, MetaValue]>, list: Tensor[], random: () => number): Uint8Array {
  const out = new ByteWriter();
  out.bytes(new TextEncoder().encode("GGUF"));
  out.u32(GGUF_VERSION);
  out.u64(list.length);
  out.u64(meta.length);
  for (const [key, value] of meta) writeMeta(out, key, value);
  let offset = 0;
  for (const tensor of list) {
    out.string(tensor.name);
    out.u32(tensor.dims.length);
    for (const dim of tensor.dims) out.u64(dim);
    out.u32(GGML_TYPE_F32);
    out.u64(offset);
    offset = alignUp(offset + elementCount(tensor) * 4);
  }
  out.padTo(ALIGNMENT);
  for (const tensor of list) {
    writeTensorData(out, tensor, random);
    out.padTo(ALIGNMENT);
  }
  return out.result();
}

function modelParts(options: TinyGgufOptions) {
  const shape = shapeOf(options);
  const list = tensors(vocabularySize(options), shape, options.reranker ?? false);
  if (options.vocabulary === "bpe") leanTowards(list, shape, chatVocabulary(options.answers).leaning);
  const strings = Object.entries(options.strings ?? {}).map(([key, value]): [string, MetaValue] => [key, { type: T_STRING, value }]);
  return { meta: [...metadata(options, shape), ...strings], list, random: prng(options.seed ?? 0x11a3ad0c) };
}

/**
 * The tiny model's header fields the memory estimate reads, as a stored model's config carries them
 * (strings): for tests that plan or size runners without writing the file.
 */
export function tinyLlamaHeader(context = N_CTX): Record<string, string> {
  return {
    "general.architecture": "llama",
    "llama.block_count": String(N_LAYER),
    "llama.embedding_length": String(N_EMBD),
    "llama.feed_forward_length": String(N_FF),
    "llama.attention.head_count": String(N_HEAD),
    "llama.context_length": String(context),
    "llama.vocab_size": String(vocabulary().tokens.length),
  };
}

/** The tiny llama model as GGUF v3 bytes; deterministic for a given seed. */
export function tinyLlamaGguf(options: TinyGgufOptions = {}): Uint8Array {
  const { meta, list, random } = modelParts(options);
  return writeGguf(meta, list, random);
}

/**
 * The same model split into `count` GGUF files as llama.cpp's gguf-split writes them: the
 * tensors in order, spread over the files; the first holds all the metadata, and every file says
 * which it is (`split.no`, u16), how many there are (`split.count`, u16) and how many tensors all
 * hold (`split.tensors.count`, i32). llama.cpp loads the first and finds the others by name
 * (`<prefix>-00002-of-00003.gguf`). Same seed, same weights as `tinyLlamaGguf`.
 */
export function tinyLlamaShards(count: number, options: TinyGgufOptions = {}): Uint8Array[] {
  const { meta, list, random } = modelParts(options);
  const per = Math.ceil(list.length / count);
  return Array.from({ length: count }, (_, no) => {
    const split: Array<[string, MetaValue]> = [
      ["split.no", { type: T_UINT16, value: no }],
      ["split.count", { type: T_UINT16, value: count }],
      ["split.tensors.count", { type: T_INT32, value: list.length }],
    ];
    return writeGguf(no === 0 ? [...meta, ...split] : split, list.slice(no * per, (no + 1) * per), random);
  });
}

/** What llama.cpp names the shard `no` (from 1) of `count`: `<prefix>-00001-of-00003.gguf`. */
export const shardName = (prefix: string, no: number, count: number) =>
  `${prefix}-${String(no).padStart(5, "0")}-of-${String(count).padStart(5, "0")}.gguf`;

/** Writes the tiny model to `path` (a test fixture, made at test time). */
export async function writeTinyLlamaGguf(path: string, options: TinyGgufOptions = {}): Promise<void> {
  await writeFile(path, tinyLlamaGguf(options));
}

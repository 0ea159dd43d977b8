// What a runner will cost in memory, from the model's GGUF header, before it is launched. Pure:
// table-tested, and checked against what llama-server itself reports it allocated.
//
// total = weights + KV cache + compute buffers, where
// - weights: the model's files as stored (tensor bytes plus a header of at most a few MiB), plus
//   its multimodal projector: llama.cpp maps the tensors as they are in the file.
// - KV cache: for each layer, cells x (K width + V width) x the cache type's bytes. Cells are the
//   context size (shared by the slots); on a sliding-window layer only min(context, slots x (window
//   + ubatch)), as llama.cpp sizes that cache unless `--swa-full`. Widths follow grouped-query
//   attention: key_length (or embedding / heads) x head_count_kv, per layer when the header says.
// - compute: a margin for llama.cpp's graph buffers, fitted to its own reports: per token of a
//   micro-batch (512), the larger of the logits (4 x vocabulary) and the feed-forward activations
//   (12 x feed_forward_length), plus 16 x embedding; plus the attention mask (2 bytes per cell of a
//   slot's context per token), or with flash attention off the full scores (4 x heads per cell).
// - prompt cache (host memory): llama-server keeps prompts of finished tasks in RAM up to
//   `--cache-ram`, and always keeps the newest even past it, so the bound is the limit plus one
//   slot's whole state (its share of the KV cache).
// - context checkpoints (host memory): for sliding-window layers (unless `--swa-full`) each slot
//   keeps up to `--ctx-checkpoints` copies of its window's cells (window + ubatch), to go back to
//   an earlier point of a prompt. Checkpoints kept with a cached prompt count in its limit.
// On a GPU budget the two caches are host memory, a second budget beside the GPU's (`host`); on a
// CPU budget they are part of `total`.

export type Header = Record<string, string>;

export type RunOptions = {
  /** Tokens of context in all (llama-server's --ctx-size; the slots share it). */
  contextSize: number;
  slots: number;
  /** llama-server flags that change the cost: -ctk/-ctv, -ub/-b, -fa, --swa-full. */
  flags?: string[];
  /** The host-memory caches the runner is launched with; none: neither is counted. */
  promptCache?: PromptCacheLimits;
  /** The caches are apart from the budget, in host memory (a GPU budget): counted in `host`. */
  hostApart?: boolean;
};

/** llama-server's `--cache-ram` (in bytes, whole MiB; 0 = off) and `--ctx-checkpoints` per slot. */
export type PromptCacheLimits = { bytes: number; checkpoints: number };

export type Estimate = {
  weights: number;
  kvCache: number;
  compute: number;
  /** The host prompt cache's bound. */
  promptCache: number;
  /** The context checkpoints of every slot. */
  checkpoints: number;
  /** Bytes in the budget's place: all of the parts, less those counted in `host`. */
  total: number;
  /** Bytes in host memory beside a GPU budget (the two caches); 0 on a CPU budget. */
  host: number;
  contextSize: number;
};

/** Per layer: the K and V widths (elements per cell) and whether the layer uses a sliding window. */
type Layer = { k: number; v: number; swa: boolean };

export type Shape = {
  layers: Layer[];
  heads: number;
  embedding: number;
  feedForward: number;
  vocabulary: number;
  /** Sliding window in tokens, 0 when none. */
  window: number;
  trainedContext: number | undefined;
};

const DEFAULT_UBATCH = 512;
/**
 * Many headers give no vocab_size (the token list itself is too long to keep): then Qwen's 151,936,
 * larger than most, so that the logits' share of the compute margin errs on the safe side.
 */
const UNKNOWN_VOCABULARY = 151_936;

/**
 * Architectures whose sliding-window layers follow a fixed pattern in llama.cpp when the header
 * gives none: every n-th layer attends to the whole context, the others to the window.
 */
const SWA_PATTERN: Record<string, number> = { gemma2: 2, gemma3: 6, gemma3n: 5, cohere2: 4 };

/** Bytes per element of llama.cpp's KV cache types (block types: block bytes / block elements). */
const CACHE_TYPE_BYTES: Record<string, number> = {
  f32: 4, f16: 2, bf16: 2, q8_0: 34 / 32, q4_0: 18 / 32, q4_1: 20 / 32, q5_0: 22 / 32, q5_1: 24 / 32, iq4_nl: 18 / 32,
};

const numberAt = (header: Header, key: string): number | undefined => {
  const text = header[key];
  if (text === undefined) return undefined;
  const value = Number(text);
  return Number.isFinite(value) ? value : undefined;
};

/** A per-layer value: a number for every layer, or a JSON array of one per layer. */
function perLayer(header: Header, key: string, count: number): number[] | undefined {
  const text = header[key];
  if (text === undefined) return undefined;
  if (text.startsWith("[")) {
    const values = (JSON.parse(text) as unknown[]).map(Number);
    return values.length === count ? values : undefined;
  }
  const value = Number(text);
  return Number.isFinite(value) ? Array.from({ length: count }, () => value) : undefined;
}

function swaLayers(header: Header, arch: string, count: number, window: number): boolean[] {
  if (window <= 0) return Array.from({ length: count }, () => false);
  const declared = header[`${arch}.attention.sliding_window_pattern`];
  if (declared?.startsWith("[")) {
    const flags = JSON.parse(declared) as unknown[];
    if (flags.length === count) return flags.map((f) => f === true || f === 1);
  }
  // n: layers i with (i + 1) % n != 0 use the window (llama.cpp's convention).
  const n = declared !== undefined ? Number(declared) : SWA_PATTERN[arch];
  // Unknown: every layer counts in full, an estimate that errs on the safe side.
  if (!n || !Number.isFinite(n)) return Array.from({ length: count }, () => false);
  return Array.from({ length: count }, (_, i) => (i + 1) % n !== 0);
}

/** The shape that the estimate needs, read from the header; undefined when it lacks the basics. */
export function shapeOf(header: Header, architecture = header["general.architecture"]): Shape | undefined {
  if (!architecture) return undefined;
  const at = (key: string) => numberAt(header, `${architecture}.${key}`);
  const count = at("block_count");
  const embedding = at("embedding_length");
  const heads = perLayer(header, `${architecture}.attention.head_count`, count ?? 0);
  if (!count || !embedding || !heads) return undefined;
  const kvHeads = perLayer(header, `${architecture}.attention.head_count_kv`, count) ?? heads;
  const maxHeads = Math.max(...heads);
  const keyLength = at("attention.key_length") ?? embedding / maxHeads;
  const valueLength = at("attention.value_length") ?? embedding / maxHeads;
  const window = at("attention.sliding_window") ?? 0;
  const swa = swaLayers(header, architecture, count, window);
  const vocabulary = at("vocab_size") ?? UNKNOWN_VOCABULARY;
  return {
    layers: kvHeads.map((n, i) => ({ k: keyLength * n, v: valueLength * n, swa: swa[i]! })),
    heads: maxHeads,
    embedding,
    feedForward: Math.max(...(perLayer(header, `${architecture}.feed_forward_length`, count) ?? [4 * embedding])),
    vocabulary,
    window,
    trainedContext: at("context_length"),
  };
}

/** The value of the last `-x v`, `--xx v` or `--xx=v` among `names` in the flags. */
export function flagValue(flags: string[] = [], ...names: string[]): string | undefined {
  let found: string | undefined;
  flags.forEach((token, i) => {
    const eq = token.indexOf("=");
    const [flag, inline] = eq > 0 ? [token.slice(0, eq), token.slice(eq + 1)] : [token, undefined];
    if (names.includes(flag)) found = inline ?? flags[i + 1];
  });
  return found;
}

function kvCacheBytes(shape: Shape, { contextSize, slots, flags }: RunOptions, ubatch: number): number {
  const kBytes = CACHE_TYPE_BYTES[flagValue(flags, "-ctk", "--cache-type-k") ?? "f16"] ?? 2;
  const vBytes = CACHE_TYPE_BYTES[flagValue(flags, "-ctv", "--cache-type-v") ?? "f16"] ?? 2;
  const swaFull = flags?.includes("--swa-full") ?? false;
  const swaCells = Math.min(contextSize, slots * (shape.window + ubatch));
  let bytes = 0;
  for (const layer of shape.layers) {
    const cells = layer.swa && !swaFull ? swaCells : contextSize;
    bytes += cells * (layer.k * kBytes + layer.v * vBytes);
  }
  return bytes;
}

/** The cells of one slot's sliding window, as llama.cpp sizes its part of the SWA cache. */
const windowCells = (shape: Shape, slotCells: number, ubatch: number) => Math.min(slotCells, shape.window + ubatch);

/** Host bytes of the prompt cache and the checkpoints (see the top of this file). */
function cacheBytes(shape: Shape, run: RunOptions, kvCache: number, ubatch: number): { promptCache: number; checkpoints: number } {
  const limits = run.promptCache;
  if (!limits) return { promptCache: 0, checkpoints: 0 };
  const promptCache = limits.bytes > 0 ? limits.bytes + Math.ceil(kvCache / run.slots) : 0;
  const kBytes = CACHE_TYPE_BYTES[flagValue(run.flags, "-ctk", "--cache-type-k") ?? "f16"] ?? 2;
  const vBytes = CACHE_TYPE_BYTES[flagValue(run.flags, "-ctv", "--cache-type-v") ?? "f16"] ?? 2;
  const swaLayers = run.flags?.includes("--swa-full") ? [] : shape.layers.filter((l) => l.swa);
  const cells = windowCells(shape, Math.ceil(run.contextSize / run.slots), ubatch);
  const checkpoint = swaLayers.reduce((sum, l) => sum + cells * (l.k * kBytes + l.v * vBytes), 0);
  return { promptCache, checkpoints: run.slots * limits.checkpoints * checkpoint };
}

function computeBytes(shape: Shape, { contextSize, slots, flags }: RunOptions, ubatch: number): number {
  const perToken = Math.max(4 * shape.vocabulary, 12 * shape.feedForward) + 16 * shape.embedding;
  const slotCells = Math.ceil(contextSize / slots);
  const flashOff = /^(off|0|false)$/.test(flagValue(flags, "-fa", "--flash-attn") ?? "auto");
  const attention = flashOff ? 4 * shape.heads * slotCells : 2 * slotCells;
  return ubatch * (perToken + attention);
}

/** The estimate for a run of the model; `weights` are its files' bytes (projector included). */
export function estimateMemory(shape: Shape, weights: number, run: RunOptions): Estimate {
  const batch = Number(flagValue(run.flags, "-b", "--batch-size") ?? 2048);
  const ubatch = Math.min(batch, Number(flagValue(run.flags, "-ub", "--ubatch-size") ?? DEFAULT_UBATCH)) || DEFAULT_UBATCH;
  const kvCache = kvCacheBytes(shape, run, ubatch);
  const compute = computeBytes(shape, run, ubatch);
  const { promptCache, checkpoints } = cacheBytes(shape, run, kvCache, ubatch);
  const host = run.hostApart ? promptCache + checkpoints : 0;
  const total = weights + kvCache + compute + promptCache + checkpoints - host;
  return { weights, kvCache, compute, promptCache, checkpoints, total, host, contextSize: run.contextSize };
}

/** llama.cpp rounds a context up to a multiple of 256: the sizes offered here are such multiples. */
const CONTEXT_STEP = 256;

/**
 * The largest context, at most `ceiling`, whose run fits in `available` bytes; undefined when not
 * even one step fits. Costs grow with the context, so a binary search over steps finds it.
 */
export function largestFittingContext(
  shape: Shape,
  weights: number,
  run: Omit<RunOptions, "contextSize">,
  available: number,
  ceiling: number,
): number | undefined {
  const fits = (steps: number) => estimateMemory(shape, weights, { ...run, contextSize: steps * CONTEXT_STEP }).total <= available;
  if (estimateMemory(shape, weights, { ...run, contextSize: ceiling }).total <= available) return ceiling;
  let low = 0;
  let high = Math.floor(ceiling / CONTEXT_STEP);
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (fits(mid)) low = mid;
    else high = mid - 1;
  }
  return low > 0 ? low * CONTEXT_STEP : undefined;
}

import { describe, expect, it } from "vitest";
import { estimateMemory, largestFittingContext, shapeOf, type Header } from "../../../src/scheduler/memory/estimate.ts";

const MIB = 1024 * 1024;

/** A header as the store keeps it: values as text. */
const llama = (extra: Header = {}): Header => ({
  "general.architecture": "llama",
  "llama.block_count": "32",
  "llama.embedding_length": "4096",
  "llama.feed_forward_length": "14336",
  "llama.attention.head_count": "32",
  "llama.attention.head_count_kv": "8",
  "llama.context_length": "131072",
  "llama.vocab_size": "128256",
  ...extra,
});

describe("shapeOf", () => {
  it("reads layers, grouped-query widths and the trained context", () => {
    const shape = shapeOf(llama())!;
    expect(shape.layers).toHaveLength(32);
    // head dim 128 x 8 KV heads
    expect(shape.layers[0]).toEqual({ k: 1024, v: 1024, swa: false });
    expect(shape.trainedContext).toBe(131072);
  });

  it("takes per-layer KV heads and explicit key/value lengths", () => {
    const shape = shapeOf({
      ...llama({ "llama.block_count": "3", "llama.attention.head_count_kv": "[1,2,4]" }),
      "llama.attention.key_length": "64",
      "llama.attention.value_length": "32",
    })!;
    expect(shape.layers.map((l) => [l.k, l.v])).toEqual([[64, 32], [128, 64], [256, 128]]);
  });

  it.each<[string, Header, boolean[]]>([
    ["gemma3's pattern: every 6th layer global", { "general.architecture": "gemma3", "gemma3.block_count": "7", "gemma3.embedding_length": "64", "gemma3.attention.head_count": "4", "gemma3.attention.sliding_window": "512" }, [true, true, true, true, true, false, true]],
    ["a declared pattern number", { ...llama({ "llama.block_count": "4" }), "llama.attention.sliding_window": "128", "llama.attention.sliding_window_pattern": "2" }, [true, false, true, false]],
    ["a declared pattern per layer", { ...llama({ "llama.block_count": "3" }), "llama.attention.sliding_window": "128", "llama.attention.sliding_window_pattern": "[true,false,true]" }, [true, false, true]],
    ["a window of unknown pattern: every layer in full (the safe side)", { ...llama({ "llama.block_count": "2" }), "llama.attention.sliding_window": "4096" }, [false, false]],
  ])("sliding-window layers: %s", (_, header, swa) => {
    expect(shapeOf(header)!.layers.map((l) => l.swa)).toEqual(swa);
  });

  it("is undefined without the basics", () => {
    expect(shapeOf({})).toBeUndefined();
    expect(shapeOf({ "general.architecture": "llama" })).toBeUndefined();
  });
});

describe("estimateMemory", () => {
  const shape = shapeOf(llama())!;
  const weights = 4_920 * MIB;
  it.each<[string, { contextSize: number; slots: number; flags?: string[] }, number]>([
    // 32 layers x 8192 cells x (1024 + 1024) x 2 bytes
    ["f16 cache, 8192 tokens", { contextSize: 8192, slots: 1 }, 1024 * MIB],
    ["the slots share the context: same cache", { contextSize: 8192, slots: 4 }, 1024 * MIB],
    ["q8_0 cache: 34 bytes per 32 elements", { contextSize: 8192, slots: 1, flags: ["-ctk", "q8_0", "--cache-type-v=q8_0"] }, 544 * MIB],
    ["twice the context, twice the cache", { contextSize: 16384, slots: 1 }, 2048 * MIB],
  ])("KV cache: %s", (_, run, kv) => {
    const estimate = estimateMemory(shape, weights, run);
    expect(estimate.kvCache).toBe(kv);
    expect(estimate.total).toBe(weights + kv + estimate.compute);
  });

  it("caps sliding-window layers at slots x (window + ubatch), unless --swa-full", () => {
    const header = { ...llama({ "llama.block_count": "2" }), "llama.attention.sliding_window": "1024", "llama.attention.sliding_window_pattern": "2" };
    const swa = shapeOf(header)!;
    const perCell = (1024 + 1024) * 2;
    // Layer 0: min(32768, 2 x (1024 + 512)) cells; layer 1: all 32768.
    expect(estimateMemory(swa, 0, { contextSize: 32768, slots: 2 }).kvCache).toBe((3072 + 32768) * perCell);
    expect(estimateMemory(swa, 0, { contextSize: 32768, slots: 2, flags: ["--swa-full"] }).kvCache).toBe(2 * 32768 * perCell);
  });

  it("compute: logits or feed-forward per micro-batch token, plus the mask; more without flash attention", () => {
    const base = estimateMemory(shape, 0, { contextSize: 8192, slots: 1 }).compute;
    // 512 x (4 x 128256 + 16 x 4096) + 512 x 8192 x 2
    expect(base).toBe(512 * (4 * 128256 + 16 * 4096) + 512 * 8192 * 2);
    expect(estimateMemory(shape, 0, { contextSize: 8192, slots: 1, flags: ["-fa", "off"] }).compute).toBe(512 * (4 * 128256 + 16 * 4096) + 512 * 8192 * 4 * 32);
    expect(estimateMemory(shape, 0, { contextSize: 8192, slots: 1, flags: ["-ub", "256"] }).compute).toBe(256 * (4 * 128256 + 16 * 4096) + 256 * 8192 * 2);
  });
});

describe("estimateMemory: the host caches", () => {
  const shape = shapeOf(llama())!;
  const cache = { bytes: 1024 * MIB, checkpoints: 4 };
  it("none without limits: llama-server's own are not counted here", () => {
    const estimate = estimateMemory(shape, 0, { contextSize: 8192, slots: 4 });
    expect([estimate.promptCache, estimate.checkpoints, estimate.host]).toEqual([0, 0, 0]);
  });

  it("the prompt cache: its limit, plus one slot's state (the newest is kept past the limit)", () => {
    const estimate = estimateMemory(shape, 0, { contextSize: 8192, slots: 4, promptCache: cache });
    // 1024 MiB of KV cache, a quarter of it per slot.
    expect(estimate.promptCache).toBe(1024 * MIB + 256 * MIB);
    expect(estimate.checkpoints).toBe(0); // no sliding-window layers
    expect(estimate.total).toBe(estimate.kvCache + estimate.compute + estimate.promptCache);
    expect(estimateMemory(shape, 0, { contextSize: 8192, slots: 4, promptCache: { bytes: 0, checkpoints: 4 } }).promptCache).toBe(0);
  });

  it("checkpoints: per slot, each the sliding-window layers' cells of a slot, unless --swa-full", () => {
    const header = { ...llama({ "llama.block_count": "2" }), "llama.attention.sliding_window": "1024", "llama.attention.sliding_window_pattern": "2" };
    const swa = shapeOf(header)!;
    const perCell = (1024 + 1024) * 2;
    // 2 slots x 4 checkpoints x one SWA layer x min(16384, 1024 + 512) cells
    const run = { contextSize: 32768, slots: 2, promptCache: cache };
    expect(estimateMemory(swa, 0, run).checkpoints).toBe(2 * 4 * 1536 * perCell);
    expect(estimateMemory(swa, 0, { ...run, flags: ["--swa-full"] }).checkpoints).toBe(0);
    expect(estimateMemory(swa, 0, { ...run, promptCache: { ...cache, checkpoints: 0 } }).checkpoints).toBe(0);
  });

  it("beside a GPU budget the caches are host memory, out of the total", () => {
    const run = { contextSize: 8192, slots: 4, promptCache: cache };
    const inside = estimateMemory(shape, 0, run);
    const apart = estimateMemory(shape, 0, { ...run, hostApart: true });
    expect(apart.host).toBe(inside.promptCache + inside.checkpoints);
    expect(apart.total).toBe(inside.total - apart.host);
    expect(inside.host).toBe(0);
  });
});

describe("largestFittingContext", () => {
  const shape = shapeOf(llama())!;
  const weights = 4_920 * MIB;
  const cost = (contextSize: number) => estimateMemory(shape, weights, { contextSize, slots: 1 }).total;
  it.each<[string, number, number, number | undefined]>([
    ["the ceiling when it fits", cost(131072) + 1, 131072, 131072],
    ["a multiple of 256 just under the budget", cost(20480) + 1000, 131072, 20480],
    ["exactly at the budget", cost(4096), 131072, 4096],
    ["none when not even 256 tokens fit", cost(256) - 1, 131072, undefined],
  ])("%s", (_, available, ceiling, expected) => {
    const found = largestFittingContext(shape, weights, { slots: 1 }, available, ceiling);
    expect(found).toBe(expected);
    if (found !== undefined && found < ceiling) expect(cost(found + 256)).toBeGreaterThan(available);
  });
});

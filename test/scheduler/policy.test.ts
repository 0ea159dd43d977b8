import { describe, expect, it } from "vitest";
import { refuseFlags } from "../../src/scheduler/flags.ts";
import { embeddingPooling, keepAliveMs, pickEviction, type RunnerView } from "../../src/scheduler/policy.ts";
import type { PoolingType } from "../../sidecar/spec.ts";
import type { ModelRef } from "../../src/scheduler/types.ts";

const view = (key: string, lastUsed: number, busy = false, stopping = false): RunnerView => ({ key, lastUsed, busy, stopping });

describe("pickEviction", () => {
  it.each<[string, RunnerView[], number, ReturnType<typeof pickEviction>]>([
    ["room when under the maximum", [view("a", 1)], 2, { kind: "room" }],
    ["room when none is loaded", [], 1, { kind: "room" }],
    ["the least recently used idle runner", [view("a", 5), view("b", 2), view("c", 9)], 3, { kind: "evict", key: "b" }],
    ["never a busy one, however old", [view("a", 1, true), view("b", 7)], 2, { kind: "evict", key: "b" }],
    ["wait when all are busy", [view("a", 1, true), view("b", 2, true)], 2, { kind: "wait" }],
    ["wait while one is already stopping", [view("a", 1, false, true), view("b", 2)], 2, { kind: "wait" }],
    ["room again once the stopping one is gone", [view("b", 2)], 2, { kind: "room" }],
  ])("%s", (_, running, max, plan) => {
    expect(pickEviction(running, max)).toEqual(plan);
  });
});

describe("keepAliveMs", () => {
  it.each<[string | number, number]>([
    ["5m", 300_000],
    ["1h30m", 5_400_000],
    ["90s", 90_000],
    ["500ms", 500],
    ["0", 0],
    [0, 0],
    [30, 30_000],
    ["-1", Infinity],
    ["-5m", Infinity],
    ["2.5s", 2500],
  ])("%j -> %d ms", (value, ms) => {
    expect(keepAliveMs(value)).toBe(ms);
  });

  it.each(["", "5 minutes", "m", "1d", "--1"])("refuses %j", (value) => {
    expect(() => keepAliveMs(value)).toThrow(/keep_alive/);
  });
});

describe("refuseFlags", () => {
  it.each<[string[], string | undefined]>([
    [["--threads", "2", "--flash-attn", "on"], undefined],
    [["--temp=0.7", "--seed", "-1"], undefined],
    [["--model", "x.gguf"], "flag --model is not allowed"],
    [["--host=0.0.0.0"], "flag --host is not allowed"],
    [["--chat-template-file", "t.jinja"], "flag --chat-template-file is not allowed"],
    [["--ctx-size", "4096"], "flag --ctx-size is not allowed"],
    [["--chat-template", "/etc/passwd"], 'flag values may not be paths ("/etc/passwd")'],
    [["--chat-template=../x"], 'flag values may not be paths ("../x")'],
    [["--seed", "~root"], 'flag values may not be paths ("~root")'],
  ])("%j", (flags, reason) => {
    expect(refuseFlags(flags)).toBe(reason);
  });
});

describe("embeddingPooling (B14.2: chat models declare no pooling, and llama-server refuses OpenAI embeddings without one)", () => {
  const model = (gguf: Record<string, string>, architecture?: string): ModelRef => ({
    id: "sha256:m",
    tags: ["ai/m:latest"],
    ggufPath: "m.gguf",
    config: { ...(architecture ? { architecture } : {}), gguf },
  });
  it.each<[string, ModelRef, PoolingType | undefined, PoolingType | undefined]>([
    ["no pooling key: mean", model({ "general.architecture": "llama" }), undefined, "mean"],
    ["declared none (0): mean", model({ "qwen2.pooling_type": "0" }, "qwen2"), undefined, "mean"],
    ["declared unspecified (-1): mean", model({ "general.architecture": "bert", "bert.pooling_type": "-1" }), undefined, "mean"],
    ["declared mean: its own (no flag)", model({ "general.architecture": "bert", "bert.pooling_type": "1" }), undefined, undefined],
    ["declared cls: its own (no flag)", model({ "bert.pooling_type": "2" }, "bert"), undefined, undefined],
    ["configured wins over the header", model({ "bert.pooling_type": "2" }, "bert"), "last", "last"],
    ["no header at all: mean", { id: "sha256:m", tags: [], ggufPath: "m.gguf" }, undefined, "mean"],
  ])("%s", (_, m, configured, expected) => {
    expect(embeddingPooling(m, configured)).toBe(expected);
  });
});

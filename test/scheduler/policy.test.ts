import { describe, expect, it } from "vitest";
import { refuseFlags } from "../../src/scheduler/flags.ts";
import { cgroupCpuLimit } from "../../src/scheduler/cpu.ts";
import { embeddingPooling, keepAliveMs, pickEviction, threadShare, threadsInFlags, type MemoryNeed, type RunnerView } from "../../src/scheduler/policy.ts";
import type { PoolingType } from "../../sidecar/spec.ts";
import type { ModelRef } from "../../src/scheduler/types.ts";

const view = (key: string, lastUsed: number, busy = false, stopping = false): RunnerView => ({ key, lastUsed, busy, stopping });

describe("pickEviction", () => {
  it.each<[string, RunnerView[], number, ReturnType<typeof pickEviction>]>([
    ["room when under the maximum", [view("a", 1)], 2, { kind: "room" }],
    ["room when none is loaded", [], 1, { kind: "room" }],
    ["the least recently used idle runner", [view("a", 5), view("b", 2), view("c", 9)], 3, { kind: "evict", keys: ["b"] }],
    ["never a busy one, however old", [view("a", 1, true), view("b", 7)], 2, { kind: "evict", keys: ["b"] }],
    ["wait when all are busy", [view("a", 1, true), view("b", 2, true)], 2, { kind: "wait" }],
    ["wait while one is already stopping", [view("a", 1, false, true), view("b", 2)], 2, { kind: "wait" }],
    ["room again once the stopping one is gone", [view("b", 2)], 2, { kind: "room" }],
  ])("%s", (_, running, max, plan) => {
    expect(pickEviction(running, max)).toEqual(plan);
  });

  const sized = (key: string, lastUsed: number, bytes: number, busy = false, stopping = false): RunnerView => ({ key, lastUsed, busy, stopping, bytes });
  it.each<[string, RunnerView[], { bytes: number; budget: number }, ReturnType<typeof pickEviction>]>([
    ["room when the need fits beside the others", [sized("a", 1, 40)], { bytes: 60, budget: 100 }, { kind: "room" }],
    ["the least recently used idle one when the need does not fit", [sized("a", 5, 40), sized("b", 2, 40)], { bytes: 30, budget: 100 }, { kind: "evict", keys: ["b"] }],
    ["as many idle ones as it takes, least recently used first", [sized("a", 5, 30), sized("b", 2, 30), sized("c", 3, 30)], { bytes: 60, budget: 100 }, { kind: "evict", keys: ["b", "c"] }],
    ["never a busy one, however old and large", [sized("a", 1, 80, true), sized("b", 7, 10)], { bytes: 15, budget: 100 }, { kind: "evict", keys: ["b"] }],
    ["wait (unload nothing) when only unloading a busy one would make room", [sized("a", 1, 80, true), sized("b", 7, 10)], { bytes: 30, budget: 100 }, { kind: "wait" }],
    ["wait while one is stopping and its memory is still held", [sized("a", 1, 60, false, true), sized("b", 2, 10)], { bytes: 50, budget: 100 }, { kind: "wait" }],
    ["a full count evicts although memory is plenty", [sized("a", 1, 1), sized("b", 2, 1), sized("c", 3, 1)], { bytes: 1, budget: 100 }, { kind: "evict", keys: ["a"] }],
    ["room at exactly the budget", [sized("a", 1, 50)], { bytes: 50, budget: 100 }, { kind: "room" }],
  ])("memory: %s", (_, running, memory, plan) => {
    expect(pickEviction(running, 3, memory)).toEqual(plan);
  });

  // Beside a GPU budget, the host caches: a second budget that must hold as well.
  const hosted = (key: string, lastUsed: number, bytes: number, hostBytes: number, busy = false): RunnerView => ({ ...sized(key, lastUsed, bytes, busy), hostBytes });
  it.each<[string, RunnerView[], MemoryNeed, ReturnType<typeof pickEviction>]>([
    ["room when both hold", [hosted("a", 1, 10, 40)], { bytes: 10, budget: 100, host: { bytes: 60, budget: 100 } }, { kind: "room" }],
    ["the host's budget alone evicts, though the GPU has room", [hosted("a", 5, 10, 40), hosted("b", 2, 10, 40)], { bytes: 10, budget: 100, host: { bytes: 30, budget: 100 } }, { kind: "evict", keys: ["b"] }],
    ["the GPU's budget alone evicts, though the host has room", [hosted("a", 5, 60, 1), hosted("b", 2, 20, 1)], { bytes: 30, budget: 100, host: { bytes: 1, budget: 100 } }, { kind: "evict", keys: ["b"] }],
    ["waits for a busy runner holding the host's memory", [hosted("a", 1, 10, 80, true)], { bytes: 10, budget: 100, host: { bytes: 30, budget: 100 } }, { kind: "wait" }],
  ])("host memory: %s", (_, running, memory, plan) => {
    expect(pickEviction(running, 3, memory)).toEqual(plan);
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

describe("threads (B17.2)", () => {
  it.each([
    [2, 1, 2],
    [2, 2, 1],
    [2, 3, 1],
    [16, 3, 5],
    [1, 0, 1],
  ])("threadShare(%i cores, %i runners) = %i", (cores, runners, share) => {
    expect(threadShare(cores, runners)).toBe(share);
  });

  it.each<[string[] | undefined, number | undefined]>([
    [undefined, undefined],
    [["--temp", "1"], undefined],
    [["-t", "3"], 3],
    [["--threads=4", "--seed", "1"], 4],
    [["--threads", "2", "--threads", "6"], 6],
    [["--threads-batch", "8"], undefined],
    [["--threads", "-1"], undefined],
  ])("threadsInFlags(%j) = %j", (flags, threads) => {
    expect(threadsInFlags(flags)).toBe(threads);
  });

  it.each<[string, Parameters<typeof cgroupCpuLimit>[0], number | undefined]>([
    ["v2, no limit", { cpuMax: "max 100000\n" }, undefined],
    ["v2, 1.5 cpus", { cpuMax: "150000 100000\n" }, 2],
    ["v2, 4 cpus", { cpuMax: "400000 100000" }, 4],
    ["v1, no limit", { v1Quota: "-1\n", v1Period: "100000\n" }, undefined],
    ["v1, 2 cpus", { v1Quota: "200000", v1Period: "100000" }, 2],
    ["v1, half a cpu", { v1Quota: "50000", v1Period: "100000" }, 1],
    ["nothing readable", {}, undefined],
  ])("cgroupCpuLimit: %s", (_, files, limit) => {
    expect(cgroupCpuLimit(files)).toBe(limit);
  });
});

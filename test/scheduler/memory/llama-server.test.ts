import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSupervisor, type Supervisor } from "../../../sidecar/index.ts";
import { readGgufConfig } from "../../../src/models/gguf.ts";
import { estimateMemory, shapeOf, type Estimate } from "../../../src/scheduler/memory/estimate.ts";
import { writeTinyLlamaGguf, type TinyGgufOptions } from "../../support/tiny-gguf.ts";
import { sidecarWorld, type SidecarWorld } from "../../sidecar/harness.ts";

// The estimate against the real thing: tiny models of different shapes run by the real
// llama-server, whose log (at verbosity 4) states the buffers it allocated, and whose resident
// memory after a prompt of nearly a whole micro-batch (which touches the compute buffers) is read
// from /proc. Growth is counted from a runner of the smallest model, whose estimate is subtracted.
// The compute buffers hold attention for a slot's whole context, but a prompt touches only the part
// for the cells it fills: the cases keep a slot's context at 2048 tokens at most, so that the part
// never touched stays small beside the rest (a 32768-token slot left 0.66 of the estimate resident).

const MIB = 1024 * 1024;
const PROMPT = "abcdefgh".repeat(60); // 480 byte tokens: nearly one micro-batch of 512

type Case = { name: string; shape: TinyGgufOptions; contextSize: number; slots: number };
const CASES: Case[] = [
  { name: "wide", shape: { embedding: 512, heads: 8, layers: 6, feedForward: 1024, context: 8192 }, contextSize: 2048, slots: 1 },
  { name: "gqa4", shape: { embedding: 1024, heads: 16, kvHeads: 4, layers: 2, feedForward: 2048 }, contextSize: 2048, slots: 4 },
  { name: "gqa2", shape: { embedding: 256, heads: 8, kvHeads: 2, layers: 4, feedForward: 512, context: 4096 }, contextSize: 8192, slots: 4 },
  { name: "deep", shape: { embedding: 128, heads: 4, kvHeads: 1, layers: 12, feedForward: 256 }, contextSize: 16384, slots: 8 },
];
const BASE: Case = { name: "base", shape: {}, contextSize: 512, slots: 1 };

type Measured = { estimate: Estimate; reported: { model: number; kv: number; compute: number }; rss: number };

let world: SidecarWorld;
let supervisor: Supervisor;
const measured = new Map<string, Measured>();

const sum = (log: string, pattern: RegExp) => [...log.matchAll(pattern)].reduce((total, m) => total + Number(m[1]) * MIB, 0);
const rssOf = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;

async function measure(c: Case): Promise<Measured> {
  const path = join(world.dir, `${c.name}.gguf`);
  await writeTinyLlamaGguf(path, c.shape);
  const config = await readGgufConfig(path, (await readFile(path)).length);
  const weights = (await readFile(path)).length;
  const estimate = estimateMemory(shapeOf(config.gguf ?? {})!, weights, { contextSize: c.contextSize, slots: c.slots });
  const sidecar = await supervisor.start({
    name: `mem-${c.name}`,
    modelPath: path,
    mode: "completion",
    contextSize: c.contextSize,
    parallel: c.slots,
    extraArgs: ["--threads", "1", "-lv", "4"],
  });
  try {
    const answer = await sidecar.fetch("http://runner/completion", { method: "POST", body: JSON.stringify({ prompt: PROMPT, n_predict: 1 }) });
    expect(answer.status).toBe(200);
    await answer.text();
    const rss = rssOf(sidecar.pid);
    const log = await readFile(join(world.logDir, `mem-${c.name}.log`), "utf8");
    const reported = {
      model: sum(log, /model buffer size =\s+([\d.]+) MiB/g),
      kv: sum(log, /KV buffer size =\s+([\d.]+) MiB/g),
      compute: sum(log, /compute buffer size =\s+([\d.]+) MiB/g),
    };
    return { estimate, reported, rss };
  } finally {
    await sidecar.stop();
  }
}

beforeAll(async () => {
  world = await sidecarWorld();
  supervisor = createSupervisor({ ...world, readyTimeoutMs: 60_000, stopGraceMs: 3_000 });
  for (const c of [BASE, ...CASES]) measured.set(c.name, await measure(c));
}, 120_000);
afterAll(async () => world?.remove());

describe("the estimate against llama-server", () => {
  it.each(CASES.map((c) => [c.name, c] as const))("%s: within 15% of the buffers it reports", (name) => {
    const { estimate, reported } = measured.get(name)!;
    const total = reported.model + reported.kv + reported.compute;
    expect(reported.kv).toBeGreaterThan(0);
    expect(estimate.kvCache / reported.kv).toBeCloseTo(1, 1);
    expect(Math.abs(estimate.weights / reported.model - 1)).toBeLessThan(0.15);
    expect(Math.abs(estimate.total / total - 1)).toBeLessThan(0.15);
    console.log(`${name}: estimate ${(estimate.total / MIB).toFixed(2)} MiB, reported ${(total / MIB).toFixed(2)} MiB (ratio ${(estimate.total / total).toFixed(3)})`);
  });

  it.each(CASES.map((c) => [c.name, c] as const))("%s: within 15% of the runner's resident memory growth", (name) => {
    const base = measured.get("base")!;
    const { estimate, rss } = measured.get(name)!;
    const growth = rss - base.rss;
    const expected = estimate.total - base.estimate.total;
    expect(Math.abs(growth / expected - 1)).toBeLessThan(0.15);
    console.log(`${name}: RSS growth ${(growth / MIB).toFixed(1)} MiB, estimated ${(expected / MIB).toFixed(1)} MiB (ratio ${(growth / expected).toFixed(3)})`);
  });
});

import { cpuMicros } from "./cpu.ts";
import { startStack, type Stack } from "../test/inference/harness.ts";
import { detectRuntime } from "../src/runtime/index.ts";
import { until } from "../test/support/until.ts";
import type { RuntimeName } from "../test/support/server-process.ts";
import { median } from "./stats.ts";

// Two versions of our server side by side: the same runtime, each its own stack (store, llama-server),
// both alive for the whole run, short completions 16 at a time (BENCH_CONCURRENCY) to one and then
// the other, in rounds that alternate their order. What a change costs or saves per request, read in
// one run: runs of `bench:inference` one after the other (BENCH_ENTRY) drift apart by more than the
// change (two pairs of runs on Node read one change 8–120 µs a request worse, both loads;
// interleaved, it was even).
//
//   BENCH_B=../other/src/index.ts npm run bench:ab   (BENCH_A: this checkout's src/index.ts;
//                                BENCH_RUNTIME (bun), BENCH_LOAD (whole | streamed), BENCH_ROUNDS (6),
//                                BENCH_REQUESTS (3000 a round), BENCH_WARM (10000 a side),
//                                BENCH_CONCURRENCY (16, at most 64))

const entries = { A: process.env.BENCH_A ?? "src/index.ts", B: process.env.BENCH_B };
if (!entries.B) {
  console.error("BENCH_B: the other version's entry (e.g. another checkout's src/index.ts) is required");
  process.exit(2);
}
const runtime = (process.env.BENCH_RUNTIME ?? "bun") as RuntimeName;
const load = process.env.BENCH_LOAD ?? "whole";
const rounds = Number(process.env.BENCH_ROUNDS ?? 6);
const requests = Number(process.env.BENCH_REQUESTS ?? 3000);
const warm = Number(process.env.BENCH_WARM ?? 10_000);
const concurrency = Math.min(64, Number(process.env.BENCH_CONCURRENCY ?? 16));
const body = JSON.stringify({ model: "ai/tiny", prompt: "hi", max_tokens: 1, ...(load === "streamed" ? { stream: true } : {}) });
const PATH = "/exp/vDD4.40/engines/llama.cpp/v1/completions";

const client = await detectRuntime();
type Side = { name: "A" | "B"; stack: Stack; fetch: typeof fetch; cpu: number[]; rates: number[] };

/** One side's stack, its runner loaded with threads for up to 64 connections (llama-server serves each on one). */
async function side(name: "A" | "B", entry: string): Promise<Side> {
  const stack = await startStack({ runtime, models: ["ai/tiny"], env: { INFERENCE_SLOTS: "4" }, entry });
  const call = client.unixFetch(stack.socket);
  const configure = { model: "ai/tiny", "runtime-flags": ["--threads-http", "64"] };
  await (await call("http://localhost/engines/_configure", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(configure) })).arrayBuffer();
  await until(async () => (await (await fetch(`${stack.url}/engines/ps`)).json()).length === 1, "the configured runner");
  return { name, stack, fetch: call, cpu: [], rates: [] };
}

async function burst(side: Side, count: number): Promise<number> {
  let next = 0;
  const began = performance.now();
  const worker = async () => {
    while (next++ < count) {
      const answer = await side.fetch(`http://localhost${PATH}`, { method: "POST", headers: { "content-type": "application/json" }, body });
      const text = await answer.text();
      if (answer.status !== 200) throw new Error(`${side.name}: status ${answer.status}: ${text.slice(0, 300)}`);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return (count * 1000) / (performance.now() - began);
}

const sides: Side[] = [];
try {
  sides.push(await side("A", entries.A));
  sides.push(await side("B", entries.B));
  for (const each of sides) await burst(each, warm);
  for (let round = 0; round < rounds; round++) {
    for (const each of round % 2 ? [...sides].reverse() : sides) {
      const before = cpuMicros(each.stack.server.pid);
      each.rates.push(await burst(each, requests));
      each.cpu.push((cpuMicros(each.stack.server.pid) - before) / requests);
    }
  }
  console.log(`${runtime}, ${load} (${rounds} x ${requests} requests a side, ${concurrency} at a time, rounds alternating):`);
  for (const { name, cpu, rates } of sides) {
    console.log(`  ${name} (${entries[name]}): CPU per request ${cpu.map((c) => c.toFixed(0)).join(", ")} µs; ${rates.map((r) => r.toFixed(0)).join(", ")} req/s`);
  }
  const [a, b] = sides as [Side, Side];
  console.log(`  B / A, medians: CPU per request ${(median(b.cpu) / median(a.cpu)).toFixed(3)} (${median(a.cpu).toFixed(0)} vs ${median(b.cpu).toFixed(0)} µs); req/s ${(median(b.rates) / median(a.rates)).toFixed(3)}`);
} finally {
  await Promise.all(sides.map((each) => each.stack.stop()));
}

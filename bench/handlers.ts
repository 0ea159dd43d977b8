import { join } from "node:path";
import { readdir } from "node:fs/promises";
import { buildServices } from "../src/app.ts";
import { loadConfig } from "../src/config.ts";
import { guard } from "../src/http/guard.ts";
import { detectRuntime, type Runtime } from "../src/runtime/index.ts";
import { serveWithNodeHttp } from "../src/runtime/node-http.ts";
import { useLightWebTypes } from "../src/runtime/node-response.ts";
import { runnerServiceEnv, startStack } from "../test/inference/harness.ts";
import { threadMicros, threadSplit } from "./cpu.ts";
import { adapterInference } from "./runtimes/adapter-inference.ts";
import { callHeaders } from "./runtimes/runner-call.ts";
import { median } from "./stats.ts";

// What our handlers cost per request, in one process: the model runner's handler (guarded as on its
// Unix socket) against the adapter step's (bench/runtimes/adapter-proxy.ts: the runner's answer
// passed on, nothing else), each called with a `Request`, 16 at a time, in front of the same
// llama-server. No server and no load generator share the cores with them, so the figures hold to
// about ±20 µs, where bench:inference's move by more. It prints each side's CPU per request, per
// thread, and its minor page faults.
//   npm run bench:handlers                 # under Bun; `node bench/handlers.ts` or `deno run -A` for the others
//   BENCH_LOAD (whole | streamed), BENCH_REQUESTS (3000 a round), BENCH_ROUNDS (6), BENCH_WARM (12000 a side),
//   BENCH_CONCURRENCY (16), BENCH_CANNED=1: the runner's answer, taken once, given back at once for
//   every call (no I/O): what our JavaScript alone costs.

const load = process.env.BENCH_LOAD ?? "whole";
const requests = Number(process.env.BENCH_REQUESTS ?? 3000);
const rounds = Number(process.env.BENCH_ROUNDS ?? 6);
const warm = Number(process.env.BENCH_WARM ?? 12_000);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 16);
const canned = process.env.BENCH_CANNED === "1";
const body = JSON.stringify({ model: "ai/tiny", prompt: "hi", max_tokens: 1, ...(load === "streamed" ? { stream: true } : {}) });

/** The runner's answer to one completion, once taken (BENCH_CANNED). */
type Kept = { answer?: { bytes: Uint8Array; headers: [string, string][] } };

/** The runtime, its runner calls for completions answered from `kept` once it holds an answer. */
function withCannedRunner(runtime: Runtime, kept: Kept): Runtime {
  const unixFetch = (socket: string): typeof fetch => {
    const real = runtime.unixFetch(socket);
    return ((input: RequestInfo | URL, init?: RequestInit) => {
      const { answer } = kept;
      if (!answer || init?.method !== "POST" || !String(input).endsWith("/v1/completions")) return real(input, init);
      return new Promise<Response>((resolve) => setImmediate(() => resolve(new Response(answer.bytes.slice(), { headers: answer.headers }))));
    }) as typeof fetch;
  };
  return { ...runtime, unixFetch };
}

const runtime = await detectRuntime();
// The Response and Headers our server's handlers make under node:http (Node, Deno) are its light
// ones, which serving installs: here too, or our forwarding would be timed making native ones.
if (runtime.serve === serveWithNodeHttp) useLightWebTypes();
const kept: Kept = {};
// The model pulled into a store by our server, as bench:inference's; then served here, in-process.
const stack = await startStack({ models: ["ai/tiny"] });
await stack.server.stop(10_000);
const ourSocket = join(stack.dir, "in-process.sock");
const env = { ...process.env, ...runnerServiceEnv(stack.dir, stack.registry, ourSocket), INFERENCE_SLOTS: "4" };
const services = await buildServices(loadConfig(env), withCannedRunner(runtime, kept));
const runner = services.find((service) => service.name.includes("runner"))!;
const ours = guard(runner.handler, { kind: "unix", path: ourSocket }, runner.policy);
const request = (path: string) => new Request(`http://localhost${path}`, { method: "POST", headers: { "content-type": "application/json", "content-length": String(body.length) }, body });

try {
  await (await ours(request("/exp/vDD4.40/engines/llama.cpp/v1/completions"))).arrayBuffer(); // loads the runner
  const runFiles = await readdir(join(stack.dir, "run"));
  const socket = join(stack.dir, "run", runFiles.find((name) => name.includes("-completion-") && name.endsWith(".sock"))!);
  const call = runtime.unixFetch(socket);
  if (canned) {
    const answer = await call("http://runner/v1/completions", { method: "POST", headers: callHeaders(new TextEncoder().encode(body)), body });
    kept.answer = { bytes: new Uint8Array(await answer.arrayBuffer()), headers: [["content-type", answer.headers.get("content-type") ?? "application/json"]] };
  }
  const adapter = adapterInference(withCannedRunner(runtime, kept).unixFetch(socket));
  const sides = {
    ours: () => ours(request("/exp/vDD4.40/engines/llama.cpp/v1/completions")),
    adapter: () => adapter(request("/v1/completions")),
  };
  const burst = async (side: keyof typeof sides, count: number) => {
    let next = 0;
    const worker = async () => {
      while (next++ < count) {
        const answer = await sides[side]();
        const text = await answer.text();
        if (answer.status !== 200) throw new Error(`${side}: ${answer.status} ${text.slice(0, 200)}`);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
  };
  for (const side of ["ours", "adapter"] as const) await burst(side, warm);
  const cpu: Record<string, number[]> = { ours: [], adapter: [] };
  const threads: Record<string, string> = {};
  const faults: Record<string, number[]> = { ours: [], adapter: [] };
  for (let round = 0; round < rounds; round++) {
    for (const side of round % 2 ? (["adapter", "ours"] as const) : (["ours", "adapter"] as const)) {
      const [threadsBefore, usageBefore] = [threadMicros(process.pid), process.resourceUsage()];
      await burst(side, requests);
      const usage = process.resourceUsage();
      cpu[side]!.push((usage.userCPUTime + usage.systemCPUTime - usageBefore.userCPUTime - usageBefore.systemCPUTime) / requests);
      faults[side]!.push((usage.minorPageFault - usageBefore.minorPageFault) / requests);
      threads[side] = threadSplit(threadsBefore, threadMicros(process.pid), requests);
    }
  }
  const list = (values: number[], digits = 0) => values.map((value) => value.toFixed(digits)).join(", ");
  console.log(`${runtime.name}, ${load}${canned ? ", the runner's answer canned" : ""} (${rounds} x ${requests} requests, ${concurrency} at a time), CPU per request in µs:`);
  for (const side of ["ours", "adapter"] as const) console.log(`  ${side.padEnd(8)} ${list(cpu[side]!)} (last round: ${threads[side]}); minor faults a request ${list(faults[side]!, 2)}`);
  const [a, b] = [median(cpu.ours!), median(cpu.adapter!)];
  console.log(`  ours over the adapter step: ${(a - b).toFixed(0)} µs a request, ${(a / b).toFixed(2)}x its CPU (medians)`);
} finally {
  await Promise.allSettled(services.map((service) => service.stop?.()));
  await stack.stop();
}

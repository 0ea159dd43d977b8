import { cpuMicros, threadMicros, threadSplit } from "./cpu.ts";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { buildLlamaServerArgs } from "../sidecar/args.ts";
import { launchEnv } from "../sidecar/binary.ts";
import { resolveLlamaServerBinary } from "../sidecar/index.ts";
import { createModelStore } from "../src/models/index.ts";
import { detectRuntime } from "../src/runtime/index.ts";
import { removeSocket } from "../src/runtime/socket-file.ts";
import { startStack, type Stack } from "../test/inference/harness.ts";
import { until } from "../test/support/until.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../test/support/server-process.ts";
import { median } from "./stats.ts";

// What our endpoint costs on top of llama-server, the tiny model pulled from a real registry, the
// same client (Bun's fetch over a Unix socket) for every side:
// 1. overhead, on each runtime (BENCH_RUNTIMES): our server under it beside the bare Bun proxy
//    (bench/runtimes/floor.ts under Bun: the one floor every runtime is judged against) and that
//    runtime's own bare proxy (its floor, shown beside), all in front of the same llama-server,
//    and beside llama-server itself (direct); short completions 16 at a time, whole (`max_tokens:
//    1`) and streamed (the same with `stream: true`), rounds alternating the sides (and their
//    order), so drift hits all alike. Each server's CPU per request is the steady figure on a
//    shared machine (requests per second move with whatever else runs). Targets: ours at least
//    0.95 of the bare Bun proxy's requests per second on Bun with p50 at most 1 ms over it, 0.85
//    on Node and Deno;
// 2. embeddings (Bun), 64 at a time: the same against the bare Bun proxy;
// 3. streaming (Bun): 256-token streams, each chunk's lag behind the moment llama-server produced
//    it, through us vs direct;
// 4. cold start (Bun): request to first token for an unloaded model vs spawning llama-server by
//    hand, polling /health every 5 ms and sending the same request.
//
//   npm run bench:inference     (BENCH_RUNTIMES (bun,node,deno), BENCH_LOADS (whole,streamed; long:
//                                32-token streams, what each chunk costs, with fewer BENCH_REQUESTS),
//                                BENCH_ROUNDS, BENCH_REQUESTS, BENCH_WARM, BENCH_CONCURRENCY tune it;
//                                BENCH_ENTRY=<file> serves ours from another entry (another
//                                checkout's src/index.ts); BENCH_PROFILE=<dir> writes CPU profiles
//                                of Bun's and Node's sides; BENCH_PARTS picks among overhead,embeddings,
//                                streaming,cold; BENCH_STEPS=1 adds the bare proxy served through our
//                                runtime adapter, which splits the gap into the adapter's share and
//                                our handlers'; the summary of ratios comes last)

/** One line per part and runtime, printed together at the end. */
const summary: string[] = [];

const runtimes = (process.env.BENCH_RUNTIMES ?? "bun,node,deno").split(",") as RuntimeName[];
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
// 3000 a round (about a second per side): with 1000 the five rounds measured under two seconds
// per side, and the ratio of one run moved by several hundredths (0.946-1.024 over fifteen runs).
const requestsPerRound = Number(process.env.BENCH_REQUESTS ?? 3000);
/**
 * Requests each side serves at least before the measured rounds. Under Bun, then more, in bursts,
 * until the JIT compiler's threads stayed quiet (under 1 µs per request) for WARM_QUIET bursts in
 * a row, at most WARM_MAX requests. Ours runs far more JavaScript than the bare proxy: its hot
 * functions reached JSC's top tier only after 10000 to 20000 requests, in bursts (one quiet burst
 * of 2000 was followed by more compiling), and until then the compiler cost 10 to 26 µs per
 * request, counted against us although a long-running server pays it once. V8 (Node, Deno)
 * compiles on threads that share a name with its others (the collector's): those sides get
 * V8_WARM requests.
 */
const warmUp = Number(process.env.BENCH_WARM ?? 2000);
const WARM_BURST = 2000;
const WARM_QUIET = 3;
const WARM_MAX = 60_000;
const V8_WARM = Number(process.env.BENCH_V8_WARM ?? 10_000);
/** A folder to write CPU profiles (--cpu-prof, Bun's or Node's; Deno has none) of our server and the bare proxies into. */
const profileDir = process.env.BENCH_PROFILE;
function profiled(runtime: RuntimeName, name: string): Record<string, string> {
  if (!profileDir || runtime === "deno") return {};
  const options = `--cpu-prof --cpu-prof-interval=100 --cpu-prof-dir=${join(profileDir, `${runtime}-${name}`)}`;
  return runtime === "bun" ? { BUN_OPTIONS: options } : { NODE_OPTIONS: options };
}
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const P = "/exp/vDD4.40";

// The runtime's own Unix-socket fetch (Bun's, as the bench runs under Bun), the same for every side.
const client = await detectRuntime();
const fetchers = new Map<string, typeof fetch>();
/** `fresh`: on a connection of its own (llama-server closes one after a stream, which a pooled one would meet on its next call). */
function post(socketPath: string, path: string, body: object, fresh = false): Promise<Response> {
  let fetchVia = fetchers.get(socketPath);
  if (!fetchVia) fetchers.set(socketPath, (fetchVia = client.unixFetch(socketPath)));
  return fetchVia(`http://localhost${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    ...(fresh ? { keepalive: false } : {}),
  });
}

const ms = (value: number) => `${value.toFixed(2)} ms`;
const load1 = async () => (await readFile("/proc/loadavg", "utf8")).split(" ").slice(0, 3).join(" ");

/**
 * `pid`: the server's process, whose CPU time per request is printed; `bun`: whether it runs
 * under Bun (its warm-up waits for JSC's compiler to be quiet); none for llama-server direct.
 */
type Side = { name: string; socket: string; path: string; pid?: number; bun?: boolean };
type Totals = { requests: number; seconds: number; latencies: number[]; cpuMicros: number; threads: string };

async function runnerSocket(stack: Stack, mode = "completion"): Promise<string> {
  const files = await readdir(join(stack.dir, "run"));
  const socket = files.find((f) => f.includes(`-${mode}-`) && f.endsWith(".sock"));
  if (!socket) throw new Error(`no ${mode} runner loaded`);
  return join(stack.dir, "run", socket);
}

/** With BENCH_STEPS=1, the bare proxy served through our adapter (bench/runtimes/adapter-proxy.ts) runs beside ours. */
const steps = process.env.BENCH_STEPS === "1";
const ADAPTER = "adapter";

/** A bare proxy (`entry`: the floor, or the same served through our adapter) on `runtime`, from `socket` to the `runner` socket. */
const startFloor = (runtime: RuntimeName, runner: string, socket: string, profile: string, server?: "node-http", entry = "bench/runtimes/floor.ts") =>
  startServer({
    runtime,
    entry,
    ...(runtime === "deno" ? { runtimeArgs: denoPermissions(["--allow-read", "--allow-write"]) } : {}),
    env: { ...profiled(runtime, profile), FLOOR: "inference", RUNNER_UPSTREAM_SOCKET: runner, PROXY_SOCKET: socket, ...(server ? { FLOOR_SERVER: server } : {}) },
  });

// --- 1. overhead ---------------------------------------------------------------------------------
type Load = { label: string; body: object; concurrency: number };
const LOADS: Record<string, Load> = {
  whole: { label: "max_tokens 1", body: { model: "ai/tiny", prompt: "hi", max_tokens: 1 }, concurrency: CONCURRENCY },
  streamed: { label: "streamed, max_tokens 1", body: { model: "ai/tiny", prompt: "hi", max_tokens: 1, stream: true }, concurrency: CONCURRENCY },
  // What each chunk of a stream costs: 32 tokens, each an event of its own (not in the default loads).
  long: { label: "streamed, 32 tokens", body: { model: "ai/tiny", prompt: "hi", max_tokens: 32, ignore_eos: true, stream: true }, concurrency: CONCURRENCY },
};
const EMBEDDINGS: Load = { label: "embeddings", body: { model: "ai/embedder", input: "hello there" }, concurrency: Number(process.env.BENCH_EMBED_CONCURRENCY ?? 64) };

/** Our server under `runtime`, with the tiny model (and, under Bun, the embedder) pulled. */
const ourStack = (runtime: RuntimeName) =>
  startStack({
    runtime,
    models: ["ai/tiny"],
    embedders: runtime === "bun" ? ["ai/embedder"] : [],
    env: { ...profiled(runtime, "ours"), INFERENCE_SLOTS: process.env.BENCH_SLOTS ?? "4", ...(process.env.BENCH_RUNNER_QUEUE ? { INFERENCE_RUNNER_QUEUE: process.env.BENCH_RUNNER_QUEUE } : {}) },
    ...(process.env.BENCH_ENTRY ? { entry: process.env.BENCH_ENTRY } : {}),
  });

async function burst(side: Side, count: number, load: Load): Promise<{ seconds: number; latencies: number[] }> {
  const latencies: number[] = [];
  let next = 0;
  const began = performance.now();
  const worker = async () => {
    while (next++ < count) {
      const start = performance.now();
      const response = await post(side.socket, side.path, load.body, side.pid === undefined && "stream" in load.body);
      const answer = await response.text();
      if (response.status !== 200) throw new Error(`${side.name}: status ${response.status}: ${answer.slice(0, 300)}`);
      latencies.push(performance.now() - start);
    }
  };
  await Promise.all(Array.from({ length: load.concurrency }, worker));
  return { seconds: (performance.now() - began) / 1000, latencies };
}

/** Ours under `runtime` beside the bare Bun proxy and the runtime's own, each load in turn. */
async function overhead(runtime: RuntimeName, stack: Stack) {
  // Four clients share this runner; llama-server serves each keep-alive connection on one HTTP
  // thread, so it needs threads for all of them, or one side would wait on another's idle ones.
  await post(stack.socket, "/engines/_configure", { model: "ai/tiny", "runtime-flags": ["--threads-http", "64"] }).then((r) => r.arrayBuffer());
  await until(async () => (await (await fetch(`${stack.url}/engines/ps`)).json()).length === 1, "the configured runner");
  await (await post(stack.socket, `${P}/v1/completions`, LOADS.whole!.body)).arrayBuffer();
  const runner = await runnerSocket(stack);
  const floors: ServerProcess[] = [];
  try {
    floors.push(await startFloor("bun", runner, join(stack.dir, "bare.sock"), "bare"));
    if (runtime !== "bun") floors.push(await startFloor(runtime, runner, join(stack.dir, "own.sock"), "own"));
    // Ours serves through Deno's node:http (node-http.ts): that path's own floor beside Deno.serve's.
    if (runtime === "deno") floors.push(await startFloor(runtime, runner, join(stack.dir, "own-node-http.sock"), "own-node-http", "node-http"));
    const adapter = steps ? await startFloor(runtime, runner, join(stack.dir, "adapter.sock"), "adapter", undefined, "bench/runtimes/adapter-proxy.ts") : undefined;
    if (adapter) floors.push(adapter);
    const sides: Side[] = [
      { name: "direct", socket: runner, path: "/v1/completions" },
      { name: "bare Bun", socket: join(stack.dir, "bare.sock"), path: "/v1/completions", pid: floors[0]!.pid, bun: true },
      ...(runtime !== "bun" ? [{ name: `bare ${runtime}`, socket: join(stack.dir, "own.sock"), path: "/v1/completions", pid: floors[1]!.pid }] : []),
      ...(runtime === "deno" ? [{ name: NODE_HTTP_FLOOR, socket: join(stack.dir, "own-node-http.sock"), path: "/v1/completions", pid: floors[2]!.pid }] : []),
      ...(adapter ? [{ name: ADAPTER, socket: join(stack.dir, "adapter.sock"), path: "/v1/completions", pid: adapter.pid, bun: runtime === "bun" }] : []),
      { name: "ours", socket: stack.socket, path: `${P}/engines/llama.cpp/v1/completions`, pid: stack.server.pid, bun: runtime === "bun" },
    ];
    for (const name of (process.env.BENCH_LOADS ?? "whole,streamed").split(",")) await measureOverhead(runtime, sides, LOADS[name]!);
  } finally {
    await Promise.all(floors.map((floor) => floor.stop(2_000)));
  }
}

/** The same with many short embedding requests (Bun), where a round trip per request weighs most. */
async function embeddings(stack: Stack) {
  await post(stack.socket, "/engines/_configure", { model: "ai/embedder", mode: "embedding", "runtime-flags": ["--threads-http", "160"] }).then((r) => r.arrayBuffer());
  await until(async () => (await (await fetch(`${stack.url}/engines/ps`)).json()).some((r: { mode: string }) => r.mode === "embedding"), "the embedding runner");
  await (await post(stack.socket, `${P}/v1/embeddings`, EMBEDDINGS.body)).arrayBuffer();
  const runner = await runnerSocket(stack, "embedding");
  const bare = await startFloor("bun", runner, join(stack.dir, "bare-embed.sock"), "bare-embeddings");
  try {
    await measureOverhead(
      "bun",
      [
        { name: "direct", socket: runner, path: "/v1/embeddings" },
        { name: "bare Bun", socket: join(stack.dir, "bare-embed.sock"), path: "/v1/embeddings", pid: bare.pid, bun: true },
        { name: "ours", socket: stack.socket, path: `${P}/engines/llama.cpp/v1/embeddings`, pid: stack.server.pid, bun: true },
      ],
      EMBEDDINGS,
    );
  } finally {
    await bare.stop();
  }
}

/** Sends `side` at least `warmUp` requests; under Bun, then bursts until its compiler threads stay quiet (see warmUp). */
async function warm(side: Side, load: Load): Promise<void> {
  if (side.pid === undefined) return void (await burst(side, warmUp, load));
  if (!side.bun) return void (await burst(side, Math.max(warmUp, V8_WARM), load));
  let sent = 0;
  let quiet = 0;
  while (sent < warmUp || (quiet < WARM_QUIET && sent < WARM_MAX)) {
    const before = threadMicros(side.pid);
    await burst(side, WARM_BURST, load);
    sent += WARM_BURST;
    const compiling = ((threadMicros(side.pid).get("JITWorker") ?? 0) - (before.get("JITWorker") ?? 0)) / WARM_BURST;
    quiet = compiling < 1 ? quiet + 1 : 0;
  }
  console.log(`  warm-up ${side.name}: ${sent} requests${quiet < WARM_QUIET ? " (the compiler was still busy)" : ""}`);
}

/** Deno's bare proxy through its node:http, the server ours uses there. */
const NODE_HTTP_FLOOR = "deno node:http";

/** The target ours is held to on `runtime`: a share of the bare Bun proxy's requests per second, and (Bun) its p50 over it. */
const TARGETS: Record<RuntimeName, { ratio: number; p50Ms?: number }> = { bun: { ratio: 0.95, p50Ms: 1 }, node: { ratio: 0.85 }, deno: { ratio: 0.85 } };

async function measureOverhead(runtime: RuntimeName, sides: Side[], load: Load) {
  for (const side of sides) await warm(side, load);
  const loadBefore = await load1();
  const totals = new Map<string, Totals>(sides.map((s) => [s.name, { requests: 0, seconds: 0, latencies: [], cpuMicros: 0, threads: "" }]));
  const threadsBefore = new Map(sides.map((s) => [s.name, threadMicros(s.pid)]));
  for (let round = 0; round < rounds; round++) {
    for (const side of round % 2 ? [...sides].reverse() : sides) {
      const cpuBefore = cpuMicros(side.pid);
      const { seconds, latencies } = await burst(side, requestsPerRound, load);
      const total = totals.get(side.name)!;
      total.cpuMicros += cpuMicros(side.pid) - cpuBefore;
      total.requests += requestsPerRound;
      total.seconds += seconds;
      total.latencies.push(...latencies);
    }
  }
  // Per thread over all rounds (the other sides' rounds in between cost this process nothing).
  for (const side of sides) totals.get(side.name)!.threads = threadSplit(threadsBefore.get(side.name)!, threadMicros(side.pid), rounds * requestsPerRound);
  const rate = (t: Totals) => t.requests / t.seconds;
  const cpu = (t: Totals) => t.cpuMicros / t.requests;
  console.log(`${runtime}: overhead (${rounds} x ${requestsPerRound} requests, ${load.concurrency} concurrent, ${load.label}; load average ${loadBefore}, then ${await load1()})`);
  for (const side of sides) {
    const t = totals.get(side.name)!;
    const sorted = [...t.latencies].sort((a, b) => a - b);
    const p99 = sorted[Math.floor(sorted.length * 0.99)]!;
    const cpuText = t.cpuMicros ? `, server CPU ${cpu(t).toFixed(0)} µs/req (${t.threads})` : "";
    console.log(`  ${side.name.padEnd(10)} ${rate(t).toFixed(0)} req/s, p50 ${ms(median(t.latencies))}, p99 ${ms(p99)}, max ${ms(sorted.at(-1)!)}${cpuText}`);
  }
  const bare = totals.get("bare Bun")!;
  const ours = totals.get("ours")!;
  const own = totals.get(`bare ${runtime}`);
  const direct = totals.get("direct")!;
  console.log(`  ours/direct: ${(rate(ours) / rate(direct)).toFixed(3)}; bare Bun/direct: ${(rate(bare) / rate(direct)).toFixed(3)}; p50 above direct: ours ${ms(median(ours.latencies) - median(direct.latencies))}, bare Bun ${ms(median(bare.latencies) - median(direct.latencies))}`);
  const target = TARGETS[runtime];
  const p50Over = median(ours.latencies) - median(bare.latencies);
  const nodeHttp = totals.get(NODE_HTTP_FLOOR);
  const adapter = totals.get(ADAPTER);
  const floorText =
    (own ? `; its own bare proxy ${(rate(own) / rate(bare)).toFixed(3)} (CPU ${(cpu(own) / cpu(bare)).toFixed(2)}x)` : "") +
    (nodeHttp ? `; its bare node:http proxy ${(rate(nodeHttp) / rate(bare)).toFixed(3)} (CPU ${(cpu(nodeHttp) / cpu(bare)).toFixed(2)}x)` : "") +
    // The step between: its CPU over the floor's is the adapter's share, ours over it the handlers'.
    (adapter ? `; the bare proxy through our adapter ${(rate(adapter) / rate(bare)).toFixed(3)} (CPU ${(cpu(adapter) / cpu(bare)).toFixed(2)}x; ours ${(cpu(ours) / cpu(adapter)).toFixed(2)}x its CPU)` : "");
  const line =
    `ours/bare Bun proxy ${(rate(ours) / rate(bare)).toFixed(3)} (target >= ${target.ratio}); p50 over it ${ms(p50Over)}${target.p50Ms !== undefined ? ` (target <= ${target.p50Ms} ms)` : ""}; ` +
    `CPU per request ours/bare Bun ${(cpu(ours) / cpu(bare)).toFixed(2)}x (${cpu(ours).toFixed(0)} vs ${cpu(bare).toFixed(0)} µs)${floorText}`;
  console.log(`  ${line}`);
  summary.push(`${runtime}, ${load.label}, ${load.concurrency} concurrent: ${line}`);
}

// --- 2. streaming --------------------------------------------------------------------------------
// With `timings_per_token`, llama-server stamps each chunk with `predicted_ms`, its own clock at
// production. A chunk's lag = arrival minus production, both taken relative to the first chunk, so
// the generation's own pace cancels out; what is left is transport, and through us, our relay.
async function chunkLags(side: Side): Promise<number[]> {
  const body = { model: "ai/tiny", prompt: "Once", max_tokens: 256, ignore_eos: true, stream: true, timings_per_token: true };
  // Straight to llama-server, a fresh connection each: it closes one after a stream, and a pooled one
  // it closed fails the next stream (ECONNRESET), as the overhead's bursts already knew.
  const response = await post(side.socket, side.path, body, side.name === "direct");
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  const lags: number[] = [];
  let first: { arrived: number; produced: number } | undefined;
  let pending = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const arrived = performance.now();
    pending += decoder.decode(value, { stream: true });
    const events = pending.split("\n\n");
    pending = events.pop()!;
    for (const event of events) {
      if (!event.startsWith("data: {")) continue;
      const produced = (JSON.parse(event.slice("data: ".length)) as { timings?: { predicted_ms?: number } }).timings?.predicted_ms;
      if (produced === undefined) continue;
      first ??= { arrived, produced };
      lags.push(arrived - first.arrived - (produced - first.produced));
    }
  }
  return lags.slice(1);
}

async function streaming(stack: Stack) {
  // One slot gets the model's whole context (512 tokens): room for 256 generated ones.
  // Every runner unloaded first (the embeddings part left its own): the next request loads this one.
  await post(stack.socket, "/engines/unload", { all: true }).then((r) => r.arrayBuffer());
  await until(async () => (await (await fetch(`${stack.url}/engines/ps`)).json()).length === 0, "the runners unloaded");
  await post(stack.socket, "/engines/_configure", { model: "ai/tiny", slots: 1 }).then((r) => r.arrayBuffer());
  await (await post(stack.socket, `${P}/v1/completions`, { model: "ai/tiny", prompt: "hi", max_tokens: 1 })).arrayBuffer();
  const sides: Side[] = [
    { name: "direct", socket: await runnerSocket(stack), path: "/v1/completions" },
    { name: "ours", socket: stack.socket, path: `${P}/v1/completions` },
  ];
  const lags = { direct: [] as number[], ours: [] as number[] };
  for (let round = 0; round < rounds * 2; round++) {
    for (const side of round % 2 ? [...sides].reverse() : sides) lags[side.name as "direct" | "ours"].push(...(await chunkLags(side)));
  }
  const p99 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.99)]!;
  console.log(`streaming (${rounds * 2} streams of 256 tokens each way; a chunk's lag = arrival - production, from the first chunk)`);
  console.log(`  direct: median lag ${ms(median(lags.direct))}, p99 ${ms(p99(lags.direct))} (${lags.direct.length} chunks)`);
  console.log(`  ours:   median lag ${ms(median(lags.ours))}, p99 ${ms(p99(lags.ours))} (${lags.ours.length} chunks)`);
  console.log(`  added by us per chunk: median ${ms(median(lags.ours) - median(lags.direct))} (target < 1 ms)`);
}

// --- 3. cold start -------------------------------------------------------------------------------
const FIRST_TOKEN = { model: "ai/tiny", prompt: "hi", max_tokens: 1, stream: true };

async function firstToken(socket: string, path: string): Promise<void> {
  const response = await post(socket, path, FIRST_TOKEN);
  const reader = response.body!.getReader();
  await reader.read();
  await reader.cancel();
}

async function coldOurs(stack: Stack): Promise<number> {
  // The last request's lease ends when our side sees the client's cancel: unload once it has.
  for (;;) {
    await post(stack.socket, "/engines/unload", { all: true }).then((r) => r.arrayBuffer());
    const ps = (await (await fetch(`${stack.url}/engines/ps`)).json()) as unknown[];
    if (ps.length === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const began = performance.now();
  await firstToken(stack.socket, `${P}/v1/completions`);
  return performance.now() - began;
}

async function coldByHand(stack: Stack, modelPath: string): Promise<number> {
  const binary = await resolveLlamaServerBinary({ runtime: client, env: process.env });
  const socketPath = join(stack.dir, "run", "by-hand.sock");
  const args = buildLlamaServerArgs({ name: "by-hand", modelPath, mode: "completion", parallel: 4 }, socketPath);
  const began = performance.now();
  const child = await client.spawn(binary.path, args, { env: launchEnv(binary.path, process.env) });
  const fetchRunner = client.unixFetch(socketPath);
  // Polled every 5 ms: back to back, the polling itself would take a core from the loading runner.
  for (;;) {
    const status = await fetchRunner("http://runner/health").then((r) => (r.body?.cancel(), r.status), () => 0);
    if (status === 200) break;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await firstToken(socketPath, "/v1/completions");
  const elapsed = performance.now() - began;
  child.kill("SIGTERM");
  await child.exited;
  removeSocket(socketPath);
  return elapsed;
}

async function coldStart(stack: Stack) {
  const { id } = (await (await fetch(`${stack.url}/models/ai/tiny`)).json()) as { id: string };
  const modelPath = (await createModelStore(join(stack.dir, "models")).resolve(id))!.ggufPath;
  const ours: number[] = [];
  const hand: number[] = [];
  for (let round = 0; round < rounds * 2; round++) {
    if (round % 2) ours.push(await coldOurs(stack)), hand.push(await coldByHand(stack, modelPath));
    else hand.push(await coldByHand(stack, modelPath)), ours.push(await coldOurs(stack));
  }
  console.log(`cold start (${rounds * 2} rounds, request to first token for an unloaded model)`);
  console.log(`  by hand: ${hand.map((t) => t.toFixed(0)).join(" ")} ms; ours: ${ours.map((t) => t.toFixed(0)).join(" ")} ms`);
  console.log(`  by hand: median ${ms(median(hand))}; ours: median ${ms(median(ours))}`);
  console.log(`  ours above by hand: ${ms(median(ours) - median(hand))}, ratio ${(median(ours) / median(hand)).toFixed(3)} (target <= 100 ms above)`);
}

const parts = new Set((process.env.BENCH_PARTS ?? "overhead,embeddings,streaming,cold").split(","));
console.log(`load average at the start: ${await load1()}`);
for (const runtime of runtimes) {
  const bunOnly = runtime === "bun" && (parts.has("embeddings") || parts.has("streaming") || parts.has("cold"));
  if (!parts.has("overhead") && !bunOnly) continue;
  const stack = await ourStack(runtime);
  try {
    if (parts.has("overhead")) await overhead(runtime, stack);
    if (runtime !== "bun") continue;
    if (parts.has("embeddings")) await embeddings(stack);
    if (parts.has("streaming")) await streaming(stack);
    if (parts.has("cold")) await coldStart(stack);
  } catch (error) {
    console.log(`${runtime}: the server's last output:\n${stack.server.output().slice(-2000)}`);
    throw error;
  } finally {
    await stack.stop();
  }
}
console.log(`load average at the end: ${await load1()}`);
console.log(`summary\n${summary.map((l) => `  ${l}`).join("\n")}`);

import { availableParallelism } from "node:os";
import { startStack, type Stack } from "../test/inference/harness.ts";
import { until } from "../test/support/until.ts";

// Two runners on one machine: the same concurrent load (32-token completions) served by one model
// loaded alone, then split over two models loaded side by side. With every runner taking every core
// (llama-server's default) the two spin against each other; with the cores shared they should not.
// Each way of choosing threads is measured in its own server, alone vs side by side in the same run.
//
//   npm run bench:runners     (BENCH_REQUESTS, BENCH_CONCURRENCY tune it)

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 240);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const cores = availableParallelism();

async function post(stack: Stack, model: string): Promise<void> {
  const response = await fetch(`${stack.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, prompt: "Once upon a time", max_tokens: 32, ignore_eos: true }),
  });
  await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`${model}: status ${response.status}`);
}

async function load(stack: Stack, models: string[], count: number): Promise<number> {
  let next = 0;
  const began = performance.now();
  const worker = async (i: number) => {
    while (next++ < count) await post(stack, models[i % models.length]!);
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, (_, i) => worker(i)));
  return count / ((performance.now() - began) / 1000);
}

const ready = async (stack: Stack) =>
  ((await (await fetch(`${stack.url}/engines/ps`)).json()) as { state: string; threads: number }[]).filter((r) => r.state === "ready");

async function measure(label: string, threads: string): Promise<number> {
  const stack = await startStack({ models: ["ai/alpha", "ai/beta"], env: { INFERENCE_THREADS: threads, INFERENCE_SLOTS: "4" } });
  try {
    await load(stack, ["ai/alpha"], CONCURRENCY); // load and warm alpha, alone
    const alone = await load(stack, ["ai/alpha"], REQUESTS);
    await post(stack, "ai/beta");
    // beta's load replaced alpha (when their shares shrank): this request loads it with its share.
    await post(stack, "ai/alpha");
    await until(async () => (await ready(stack)).length === 2, "both runners ready");
    const runnerThreads = (await ready(stack)).map((r) => r.threads).join("+");
    await load(stack, ["ai/alpha", "ai/beta"], CONCURRENCY);
    const sideBySide = await load(stack, ["ai/alpha", "ai/beta"], REQUESTS);
    const ratio = sideBySide / alone;
    console.log(`${label.padEnd(30)} threads ${runnerThreads.padEnd(5)} alone ${alone.toFixed(1)} req/s, side by side ${sideBySide.toFixed(1)} req/s, ratio ${ratio.toFixed(2)}`);
    return ratio;
  } finally {
    await stack.stop();
  }
}

console.log(`${cores} cores, ${REQUESTS} requests of 32 tokens, ${CONCURRENCY} concurrent`);
const shared = await measure("cores shared (ours)", "");
const greedy = await measure("every runner takes every core", String(cores));
console.log(`every core to each runner: side by side / alone ${greedy.toFixed(2)}`);
console.log(`cores shared: side by side / alone ${shared.toFixed(2)} (target >= 0.8)`);

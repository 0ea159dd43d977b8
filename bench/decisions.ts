import { detectRuntime } from "../src/runtime/index.ts";
import { questionMessages, type Question } from "../src/decisions/core.ts";
import { startStack } from "../test/inference/harness.ts";
import type { TinyGgufOptions } from "../test/support/tiny-gguf.ts";
import { wideChatModel } from "../test/support/wide-model.ts";
import { startDirectRunner, type DirectRunner } from "./direct-runner.ts";

// One decisions request of Q questions over one long input, through our server, against two ways
// of asking them straight from a llama-server started with our runner's very flags, in one run:
//   - apart: each question its own request, its whole prompt processed (no cache), as many at once
//     as the runner has slots; N of them timed and counted for Q;
//   - the floor: the input processed once, then each question as one single-token completion in
//     the same slot, its input cached (the plain way to share the input).
// Each side in turn, the order reversed every round, so that the machine's load falls on all
// alike; each round with an input of its own, so that no side reads another's cache. For each
// side: the time, and the prompt tokens llama-server processed (`timings.prompt_n`, summed; ours
// from the answer's usage). On two models: the tiny chat model, whose prompts cost so little that
// llama-server processes several side by side in the time of one (tokens saved hardly show as
// time), and a wide one of random weights (test/support/wide-model.ts), whose prompts cost what a
// real model's do. The target: ours at most 0.4x the time of asking the questions apart.
//
//   npm run bench:decisions   (BENCH_QUESTIONS: Q, default 60; BENCH_INPUT_CHARS: the input's
//                              length, default 6000: ~4k tokens; BENCH_SAMPLE: N, default all Q on
//                              the tiny model, 8 on the wide one; BENCH_ROUNDS: default 2;
//                              BENCH_MODELS: default "tiny,wide"; BENCH_THREADS: the runner's, default 2)

const QUESTIONS = Number(process.env.BENCH_QUESTIONS ?? 60);
const INPUT_CHARS = Number(process.env.BENCH_INPUT_CHARS ?? 6000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const SLOTS = 4;
const THREADS = Number(process.env.BENCH_THREADS ?? 2);
const TARGET = 0.4;
const MODEL = "ai/decider";

type Bench = { label: string; shape: TinyGgufOptions; sample: number };
const MODELS: Record<string, Bench> = {
  tiny: { label: "tiny chat model (BPE, 2 layers of 64)", shape: { vocabulary: "bpe", seed: 1, context: 32768 }, sample: QUESTIONS },
  // 16k a slot: the input and more, four slots' KV cache in 1 GiB (65k in all).
  wide: { label: "wide random chat model (BPE, 4 layers of 256)", shape: wideChatModel({ width: 256, layers: 4, context: 16384 }), sample: 8 },
};

const runtime = await detectRuntime();

const input = (salt: string) => {
  let text = `Ticket ${salt}: `;
  for (let i = 0; text.length < INPUT_CHARS; i++) text += `Line ${i}: the checkout failed for a customer paying by card, then recovered. `;
  return text;
};
const questions = (salt: string): Question[] =>
  Array.from({ length: QUESTIONS }, (_, i) => ({ name: `q${i}`, kind: "predicate", instructions: `${salt} fact ${i} holds.`, options: [{ value: true, text: "yes" }, { value: false, text: "no" }] }));

const post = async (fetchVia: typeof fetch, path: string, body: unknown) => {
  const response = await fetchVia(`http://runner${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), timeout: false } as RequestInit);
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as Record<string, unknown>;
};

/** Each question's prompt as our server makes it: the input and the question in the model's chat template. */
async function prompts(llama: DirectRunner, salt: string, count = QUESTIONS): Promise<string[]> {
  const text = input(salt);
  const out: string[] = [];
  for (const question of questions(salt).slice(0, count)) {
    const { prompt } = await post(llama.fetchVia, "/apply-template", { messages: questionMessages([{ role: "user", content: text }], question) });
    out.push(String(prompt));
  }
  return out;
}

/** One single-token completion of `prompt`, as our server asks a label's probabilities; the tokens it processed. */
async function step(llama: DirectRunner, prompt: string, cache: boolean, slot?: number): Promise<{ slot: number; processed: number }> {
  const answer = await post(llama.fetchVia, "/completion", { prompt, n_predict: 1, cache_prompt: cache, n_probs: 2, post_sampling_probs: true, grammar: 'root ::= "Y" | "N"', ...(slot !== undefined ? { id_slot: slot } : {}) });
  return { slot: answer.id_slot as number, processed: (answer.timings as { prompt_n: number }).prompt_n };
}

type Side = { ms: number; tokens: number; note?: string };

/** Each question its own request, its prompt processed whole, SLOTS at a time: `sample` of them, counted for all. */
async function apart(llama: DirectRunner, salt: string, sample: number): Promise<Side> {
  const all = await prompts(llama, salt, sample);
  const started = performance.now();
  let tokens = 0;
  const queue = [...all];
  await Promise.all(Array.from({ length: SLOTS }, async () => {
    for (let prompt = queue.shift(); prompt !== undefined; prompt = queue.shift()) {
      const { processed } = await step(llama, prompt, false);
      tokens += processed;
    }
  }));
  const scale = QUESTIONS / sample;
  return { ms: (performance.now() - started) * scale, tokens: Math.round(tokens * scale), ...(sample < QUESTIONS ? { note: `${sample} timed` } : {}) };
}

/** The input once, then every question in the same slot, its input cached. */
async function floor(llama: DirectRunner, salt: string): Promise<Side> {
  const all = await prompts(llama, salt);
  const started = performance.now();
  const first = await step(llama, all[0]!, true);
  let tokens = first.processed;
  for (const prompt of all.slice(1)) tokens += (await step(llama, prompt, true, first.slot)).processed;
  return { ms: performance.now() - started, tokens };
}

/** Ours: one request, the official shape. */
async function ours(url: string, salt: string): Promise<Side> {
  const body = { model: MODEL, input: input(salt), questions: questions(salt).map((q) => ({ type: "predicate", name: q.name, instructions: q.instructions })) };
  const started = performance.now();
  const answer = await fetch(`${url}/v1/decisions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), timeout: false } as RequestInit);
  const decided = (await answer.json()) as { usage: { input_tokens: number; input_tokens_details: { cached_tokens: number } } };
  const ms = performance.now() - started;
  if (!answer.ok) throw new Error(`decisions: ${answer.status} ${JSON.stringify(decided)}`);
  return { ms, tokens: decided.usage.input_tokens - decided.usage.input_tokens_details.cached_tokens, note: `${answer.headers.get("x-llamadock-decision-slots")} slots` };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

async function benchModel(name: string, bench: Bench): Promise<void> {
  const stack = await startStack({ models: [], shaped: { [MODEL]: bench.shape }, env: { INFERENCE_SLOTS: String(SLOTS), INFERENCE_THREADS: String(THREADS) } });
  try {
    // Loads our runner (its flags are what the direct one is started with).
    const warm = await fetch(`${stack.url}/v1/decisions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, input: "warm", questions: [{ type: "predicate", instructions: "It holds." }] }) });
    if (!warm.ok) throw new Error(`warm-up: ${warm.status} ${await warm.text()}`);
    const llama = await startDirectRunner(stack, runtime);
    try {
      const sides: Record<string, (salt: string) => Promise<Side>> = {
        apart: (salt) => apart(llama, salt, Math.min(QUESTIONS, Number(process.env.BENCH_SAMPLE ?? bench.sample))),
        floor: (salt) => floor(llama, salt),
        llamadock: (salt) => ours(stack.url, salt),
      };
      const results: Record<string, Side[]> = { apart: [], floor: [], llamadock: [] };
      console.log(`${name}: ${bench.label}, ${SLOTS} slots, ${THREADS} threads; ${QUESTIONS} predicates over an input of ${INPUT_CHARS} characters`);
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 === 0 ? Object.keys(sides) : Object.keys(sides).reverse();
        for (const side of order) {
          const result = await sides[side]!(`${name}-${side}-${round}`);
          results[side]!.push(result);
          console.log(`  round ${round + 1}, ${side}: ${seconds(result.ms)}, ${result.tokens} prompt tokens processed${result.note ? ` (${result.note})` : ""}`);
        }
      }
      const ms = (side: string) => median(results[side]!.map((r) => r.ms));
      const ratios = results.llamadock!.map((r, i) => r.ms / results.apart![i]!.ms);
      const met = Math.max(...ratios) <= TARGET;
      console.log(`  medians: apart ${seconds(ms("apart"))}, floor ${seconds(ms("floor"))}, llamadock ${seconds(ms("llamadock"))}`);
      console.log(`  llamadock/apart ${ratios.map((r) => r.toFixed(3)).join(", ")} (target <= ${TARGET}: ${met ? "met" : "not met"}); llamadock/floor ${results.llamadock!.map((r, i) => (r.ms / results.floor![i]!.ms).toFixed(3)).join(", ")}`);
    } finally {
      await llama.stop();
    }
  } catch (error) {
    console.error(stack.server.output().slice(-3000));
    throw error;
  } finally {
    await stack.stop();
  }
}

for (const name of (process.env.BENCH_MODELS ?? "tiny,wide").split(",")) {
  const bench = MODELS[name];
  if (!bench) throw new Error(`BENCH_MODELS: no model ${name} (${Object.keys(MODELS).join(", ")})`);
  await benchModel(name, bench);
}

import { detectRuntime } from "../src/runtime/index.ts";
import { questionMessages, type Question } from "../src/decisions/core.ts";
import { startStack } from "../test/inference/harness.ts";
import { startDirectRunner } from "./direct-runner.ts";

// One decisions request of Q questions over one long input, through our server, against two
// figures measured in the same run straight from a llama-server started with our runner's very
// flags:
//   - the floor: the input processed once, then each question as one single-token completion in
//     the same slot, its input cached (what "the time of its prefix plus Q single-token steps" is);
//   - every question its own prefix: each question's prompt processed whole (no cache), timed on a
//     sample of N and counted for Q.
// Ratios: ours over the floor (the target: about 1, not Q prefixes), and Q prefixes over ours.
//
//   npm run bench:decisions   (BENCH_QUESTIONS: Q, default 400; BENCH_INPUT_CHARS: the input's
//                              length, default 6000: ~3k tokens; BENCH_SAMPLE: N, default 16)

const QUESTIONS = Number(process.env.BENCH_QUESTIONS ?? 400);
const INPUT_CHARS = Number(process.env.BENCH_INPUT_CHARS ?? 6000);
const SAMPLE = Math.min(QUESTIONS, Number(process.env.BENCH_SAMPLE ?? 16));
const MODEL = "ai/decider";
/** The tiny chat model (byte-level BPE: about a token a character), 4 slots of 8192 tokens. */
const SHAPE = { vocabulary: "bpe" as const, seed: 1, context: 32768 };

const runtime = await detectRuntime();
const stack = await startStack({ models: [], shaped: { [MODEL]: SHAPE }, env: { INFERENCE_SLOTS: "4", INFERENCE_THREADS: "2" } });

const input = (salt: string) => {
  let text = `Ticket ${salt}: `;
  for (let i = 0; text.length < INPUT_CHARS; i++) text += `Line ${i}: the checkout failed for a customer paying by card, then recovered. `;
  return text;
};
const questions = (salt: string): Question[] =>
  Array.from({ length: QUESTIONS }, (_, i) => ({ name: `q${i}`, kind: "predicate", instructions: `${salt} fact ${i} holds.`, options: [{ value: true, text: "yes" }, { value: false, text: "no" }] }));

const post = async (fetchVia: typeof fetch, path: string, body: unknown) => {
  const response = await fetchVia(`http://runner${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as Record<string, unknown>;
};

/** Each question's prompt as our server makes it: the input and the question in the model's chat template. */
async function prompts(fetchVia: typeof fetch, salt: string): Promise<string[]> {
  const text = input(salt);
  const out: string[] = [];
  for (const question of questions(salt)) {
    const { prompt } = await post(fetchVia, "/apply-template", { messages: questionMessages([{ role: "user", content: text }], question) });
    out.push(String(prompt));
  }
  return out;
}

/** One single-token completion of `prompt`, as our server asks a label's probabilities. */
const step = (fetchVia: typeof fetch, prompt: string, cache: boolean, slot?: number) =>
  post(fetchVia, "/completion", { prompt, n_predict: 1, cache_prompt: cache, n_probs: 2, post_sampling_probs: true, grammar: 'root ::= "Y" | "N"', ...(slot !== undefined ? { id_slot: slot } : {}) });

try {
  // Loads our runner (its flags are what the direct one is started with).
  const warm = await fetch(`${stack.url}/v1/decisions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, input: "warm", questions: [{ type: "predicate", instructions: "It holds." }] }) });
  if (!warm.ok) throw new Error(`warm-up: ${warm.status} ${await warm.text()}`);
  const llama = await startDirectRunner(stack, runtime);
  try {
    // The floor: the input once, then every question in the same slot, its input cached.
    const floorPrompts = await prompts(llama.fetchVia, "floor");
    const floorStart = performance.now();
    const first = await step(llama.fetchVia, floorPrompts[0]!, true);
    const slot = first.id_slot as number;
    const prefixTokens = (first.timings as { prompt_n: number }).prompt_n;
    for (const prompt of floorPrompts.slice(1)) await step(llama.fetchVia, prompt, true, slot);
    const floorMs = performance.now() - floorStart;

    // Every question its own prefix: a sample processed whole, counted for all.
    const wholePrompts = await prompts(llama.fetchVia, "whole");
    const wholeStart = performance.now();
    for (const prompt of wholePrompts.slice(0, SAMPLE)) await step(llama.fetchVia, prompt, false);
    const wholeMs = ((performance.now() - wholeStart) / SAMPLE) * QUESTIONS;

    // Ours: one request, the official shape.
    const oursStart = performance.now();
    const answer = await fetch(`${stack.url}/v1/decisions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, input: input("ours"), questions: questions("ours").map((q) => ({ type: "predicate", name: q.name, instructions: q.instructions })) }),
    });
    const decided = (await answer.json()) as { usage: { input_tokens: number; input_tokens_details: { cached_tokens: number } } };
    const oursMs = performance.now() - oursStart;
    if (!answer.ok) throw new Error(`decisions: ${answer.status} ${JSON.stringify(decided)}`);
    const processed = decided.usage.input_tokens - decided.usage.input_tokens_details.cached_tokens;

    console.log(`model: tiny chat model (BPE, 2 layers of 64), 4 slots, 2 threads; ${QUESTIONS} predicates over an input of ${prefixTokens} tokens (with the first question)`);
    console.log(`floor (llama-server, input once, then ${QUESTIONS} single-token steps in one slot): ${(floorMs / 1000).toFixed(2)} s`);
    console.log(`every question its own prefix (llama-server, ${SAMPLE} timed, counted for ${QUESTIONS}): ${(wholeMs / 1000).toFixed(2)} s`);
    console.log(`llamadock (one request, ${answer.headers.get("x-llamadock-decision-slots")} slots): ${(oursMs / 1000).toFixed(2)} s, ${processed} tokens processed of ${decided.usage.input_tokens}`);
    console.log(`ours/floor ${(oursMs / floorMs).toFixed(2)}; ${QUESTIONS} prefixes/ours ${(wholeMs / oursMs).toFixed(1)}`);
  } finally {
    await llama.stop();
  }
} catch (error) {
  console.error(stack.server.output().slice(-3000));
  throw error;
} finally {
  await stack.stop();
}

import { detectRuntime } from "../src/runtime/index.ts";
import { startStack } from "../test/inference/harness.ts";
import { startDirectRunner } from "./direct-runner.ts";

// Coding agents sharing one runner: K synthetic agent sessions at once, each opening with the same
// long start (a system prompt and tools, as sessions of one agent in one folder send), then T
// turns of its own growing history (a task, the model's streamed answer, the next task), through
// our server and straight to a llama-server started with the very flags of our runner, in one run.
// For each side: the prompt tokens llama-server processed (its own `timings.prompt_n`, summed)
// against the ideal (each distinct token once: the start once, each session's own tokens once),
// time to first token per turn (median, p90), the whole run's time, and the turns that processed
// their own history again. K = the slots, then twice the slots.
//
//   npm run bench:agents    (BENCH_SLOTS: slots of the runner, default 3; BENCH_TURNS: T, default 4;
//                            BENCH_PREFIX_CHARS: the start's length, system prompt and tools, default 26000: ~20k tokens;
//                            BENCH_ANSWER: tokens a turn's answer streams, default 16;
//                            BENCH_SESSIONS: K, one run of it alone, default both K = slots and K = 2x slots)

const SLOTS = Number(process.env.BENCH_SLOTS ?? 3);
const TURNS = Number(process.env.BENCH_TURNS ?? 4);
const PREFIX_CHARS = Number(process.env.BENCH_PREFIX_CHARS ?? 26_000);
const ANSWER = Number(process.env.BENCH_ANSWER ?? 16);
const KS = process.env.BENCH_SESSIONS ? [Number(process.env.BENCH_SESSIONS)] : [SLOTS, 2 * SLOTS];
const MODEL = "ai/agent";
/** The tiny chat model (byte-level BPE, a ChatML template with tools), with room for the start and the history in each slot. */
const SHAPE = { vocabulary: "bpe" as const, seed: 1, context: 32768 };

const runtime = await detectRuntime();
const stack = await startStack({ models: [], shaped: { [MODEL]: SHAPE }, env: { INFERENCE_SLOTS: String(SLOTS), INFERENCE_THREADS: "2" } });
// Over TCP, as agents connect (over our Unix socket, Bun cut a stream silent for 10 s during a long prompt).
const viaUs = ((input: string, init: RequestInit) => fetch(new URL(new URL(input).pathname, stack.url), { ...init, timeout: false } as RequestInit)) as typeof fetch;

/** The start of every session of one run (`salt` keeps one run's start from another's caches). */
function start(salt: string): { system: string; tools: object[] } {
  const line = (i: number) => `${i}. Before you edit a file, read it whole; keep changes small and run the tests after each one.`;
  const tools = Array.from({ length: 12 }, (_, i) => ({
    type: "function",
    function: { name: `tool_${i}`, description: `Tool ${i}: ${"does one thing to the files of the repository. ".repeat(10)}`, parameters: { type: "object", properties: { path: { type: "string" }, text: { type: "string" } } } },
  }));
  let system = `[${salt}] You are a coding agent working in the user's repository.\n`;
  for (let i = 0; system.length + JSON.stringify(tools).length < PREFIX_CHARS; i++) system += `${line(i)}\n`;
  return { system, tools };
}

type Message = { role: string; content: string };
type Turn = { ttftMs: number; promptN: number; cacheN: number; predictedN: number };

/** One streamed turn: its time to first token and llama-server's counts from the last chunk. */
async function turn(fetchVia: typeof fetch, path: string, session: string, begin: ReturnType<typeof start>, history: Message[]): Promise<{ turn: Turn; answer: string }> {
  const body = { model: MODEL, messages: [{ role: "system", content: begin.system }, ...history], tools: begin.tools, prompt_cache_key: session, max_tokens: ANSWER, temperature: 0, stream: true, ignore_eos: true };
  const began = performance.now();
  const response = await fetchVia(`http://localhost${path}`, {
    method: "POST",
    // llama-server closes a connection after a stream though it announced keep-alive: none is pooled.
    headers: { "content-type": "application/json", connection: "close" },
    body: JSON.stringify(body),
  });
  if (!response.ok || !response.body) throw new Error(`status ${response.status}: ${await response.text()}`);
  let ttftMs: number | undefined;
  let text = "";
  const decoder = new TextDecoder();
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    text += decoder.decode(chunk, { stream: true });
    ttftMs ??= /"content":"[^"]/.test(text) ? performance.now() - began : undefined;
  }
  const last = (name: string) => Number([...text.matchAll(new RegExp(`"${name}":(\\d+)`, "g"))].at(-1)?.[1] ?? NaN);
  const answer = [...text.matchAll(/"content":"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`) as string).join("");
  return { turn: { ttftMs: ttftMs ?? performance.now() - began, promptN: last("prompt_n"), cacheN: last("cache_n"), predictedN: last("predicted_n") }, answer };
}

type Side = { name: string; fetchVia: typeof fetch; path: string };
type Result = { turns: Turn[][]; totalMs: number };

/** K sessions at once, T turns each; every session its own task text, growing its own history. */
async function run(side: Side, sessions: number, salt: string): Promise<Result> {
  const begin = start(salt);
  const began = performance.now();
  const turns = await Promise.all(
    Array.from({ length: sessions }, async (_, s) => {
      const history: Message[] = [];
      const mine: Turn[] = [];
      for (let t = 0; t < TURNS; t++) {
        history.push({ role: "user", content: `Session ${s}, task ${t}: ${"change the parser so that it accepts one more case, then test it. ".repeat(4)}` });
        const { turn: done, answer } = await turn(side.fetchVia, side.path, `${salt}-${s}`, begin, history);
        history.push({ role: "assistant", content: answer });
        mine.push(done);
      }
      return mine;
    }),
  );
  return { turns, totalMs: performance.now() - began };
}

/** The tokens of the start every session shares: the common prefix of two sessions' first prompts, as llama-server tokenizes them. */
async function sharedTokens(fetchVia: typeof fetch, salt: string): Promise<number> {
  const begin = start(salt);
  const tokens = async (task: string) => {
    const messages = [{ role: "system", content: begin.system }, { role: "user", content: task }];
    const { prompt } = (await (await fetchVia("http://localhost/apply-template", { method: "POST", body: JSON.stringify({ messages, tools: begin.tools }) })).json()) as { prompt: string };
    return ((await (await fetchVia("http://localhost/tokenize", { method: "POST", body: JSON.stringify({ content: prompt }) })).json()) as { tokens: number[] }).tokens;
  };
  const [a, b] = await Promise.all([tokens("Session 0"), tokens("Session 1")]);
  let n = 0;
  while (n < a.length && a[n] === b[n]) n++;
  return n;
}

/**
 * Each distinct token once: the shared start once, and each session's own tokens once (its last
 * prompt, less the start and less the answers it generated, which its slot holds already).
 */
function ideal(result: Result, shared: number): number {
  return shared + result.turns.reduce((sum, mine) => {
    const last = mine.at(-1)!;
    const generated = mine.slice(0, -1).reduce((g, t) => g + t.predictedN, 0);
    return sum + (last.promptN + last.cacheN - shared - generated);
  }, 0);
}

/** Turns after a session's first that processed more than what is new in them (their own history again). */
function reprocessed(result: Result): number {
  let count = 0;
  for (const mine of result.turns) {
    for (let t = 1; t < mine.length; t++) {
      const before = mine[t - 1]!;
      const fresh = mine[t]!.promptN + mine[t]!.cacheN - (before.promptN + before.cacheN) - before.predictedN;
      if (mine[t]!.promptN > fresh + 32) count++;
    }
  }
  return count;
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
};

/** llama-server with our runner's flags (see direct-runner.ts), as a side of the comparison. */
async function direct(): Promise<{ side: Side; stop(): Promise<void> }> {
  const runner = await startDirectRunner(stack, runtime);
  return { side: { name: "llama-server", fetchVia: runner.fetchVia, path: "/v1/chat/completions" }, stop: runner.stop };
}

try {
  // Loads our runner (its flags are what the direct one is started with).
  await turn(viaUs, "/v1/chat/completions", "warm", start("warm"), [{ role: "user", content: "hi" }]);
  const llama = await direct();
  const ours: Side = { name: "llamadock", fetchVia: viaUs, path: "/v1/chat/completions" };
  const lines: string[] = [];
  try {
    const shared = await sharedTokens(llama.side.fetchVia, "k");
    console.log(`model: tiny chat model (BPE, 2 layers of 64), ${SLOTS} slots, shared start ${shared} tokens, ${TURNS} turns of ${ANSWER} streamed tokens`);
    for (const sessions of KS) {
      const figures: Record<string, { tokens: number; ideal: number; ttft: number[]; totalMs: number; again: number }> = {};
      // Each side its own salt: neither finds the other's start in a cache (they are separate processes anyway).
      for (const side of [llama.side, ours]) {
        const result = await run(side, sessions, `${side.name}-${sessions}-${Date.now()}`);
        const all = result.turns.flat();
        figures[side.name] = { tokens: all.reduce((s, t) => s + t.promptN, 0), ideal: ideal(result, shared), ttft: all.map((t) => t.ttftMs), totalMs: result.totalMs, again: reprocessed(result) };
      }
      for (const [name, f] of Object.entries(figures)) {
        const line = `K=${sessions} ${name.padEnd(12)} prompt tokens ${String(f.tokens).padStart(7)} (ideal ${f.ideal}, ${(f.tokens / f.ideal).toFixed(2)}x), ttft median ${percentile(f.ttft, 0.5).toFixed(0)} ms, p90 ${percentile(f.ttft, 0.9).toFixed(0)} ms, total ${(f.totalMs / 1000).toFixed(2)} s, turns re-processing their history ${f.again} of ${sessions * (TURNS - 1)}`;
        console.log(line);
      }
      const [l, o] = [figures["llama-server"]!, figures["llamadock"]!];
      lines.push(`K=${sessions}: prompt tokens ours/ideal ${(o.tokens / o.ideal).toFixed(2)}, direct/ideal ${(l.tokens / l.ideal).toFixed(2)}; total time ours/direct ${(o.totalMs / l.totalMs).toFixed(2)}; ttft median ours/direct ${(percentile(o.ttft, 0.5) / percentile(l.ttft, 0.5)).toFixed(2)}`);
    }
  } finally {
    await llama.stop();
  }
  for (const line of lines) console.log(line);
} catch (error) {
  console.error(stack.server.output().slice(-3000));
  console.error((await stack.runnerLogs()).slice(-3000));
  throw error;
} finally {
  await stack.stop();
}

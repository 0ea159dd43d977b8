import { startStack, type Stack } from "../test/inference/harness.ts";

// Prompt caches across eviction: time to first token and the prompt tokens llama-server processed
// (`timings.prompt_n`) for a conversation of a few thousand tokens on a model big enough that its
// prompt takes visibly long here (a generated f32 llama: 8 layers of 512, about 110 MB):
// - warm: the next turn on the runner that served the last one;
// - resumed: the next turn after the runner was unloaded (its slot saved), loaded again and restored;
// - cold: the same with the cache off (INFERENCE_SLOT_CACHE_BUDGET=0): the whole prompt again;
// - load: a one-word prompt after an unload, the part of resumed and cold that is the load itself.
//
//   npm run bench:slots      (BENCH_LINES: the conversation's length, default 45 lines, ~3000 tokens)

const LINES = Number(process.env.BENCH_LINES ?? 45);
const MODEL = "ai/big";
const SHAPE = { embedding: 512, heads: 8, layers: 8, feedForward: 1536, context: 4096, seed: 9 };
const start = Array.from({ length: LINES }, (_, i) => `line ${i}: the quick brown fox jumps over the lazy dog.`).join("\n");

type Turn = { ttftMs: number; promptN: number };

/** One streamed completion: when its first token came, and the prompt tokens processed. */
async function turn(stack: Stack, prompt: string): Promise<Turn> {
  const began = performance.now();
  const response = await fetch(`${stack.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 4, temperature: 0, stream: true }),
  });
  if (!response.ok || !response.body) throw new Error(`status ${response.status}: ${await response.text()}`);
  let ttftMs: number | undefined;
  let text = "";
  const decoder = new TextDecoder();
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    text += decoder.decode(chunk, { stream: true });
    if (ttftMs === undefined && /"text":"[^"]/.test(text)) ttftMs = performance.now() - began;
  }
  const timings = [...text.matchAll(/"prompt_n":(\d+)/g)].at(-1);
  return { ttftMs: ttftMs ?? performance.now() - began, promptN: Number(timings?.[1] ?? NaN) };
}

const unload = (stack: Stack) => fetch(`${stack.url}/engines/unload`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"all":true}' }).then((r) => r.text());

async function run(cache: boolean): Promise<{ warm: Turn; after: Turn; load: Turn }> {
  const stack = await startStack({
    models: [],
    shaped: { [MODEL]: SHAPE },
    // A streamed prompt this long sends its first byte after the 30 s stall limit on a busy CPU here.
    env: { INFERENCE_SLOTS: "1", INFERENCE_THREADS: "2", INFERENCE_RUNNER_STALL_TIMEOUT_MS: "600000", ...(cache ? {} : { INFERENCE_SLOT_CACHE_BUDGET: "0" }) },
  });
  try {
    await turn(stack, start); // loads and processes the whole start
    const warm = await turn(stack, `${start}\nline ${LINES}: and then`);
    await unload(stack);
    const after = await turn(stack, `${start}\nline ${LINES}: and then\nline ${LINES + 1}: more`);
    await unload(stack);
    const load = await turn(stack, "hi");
    return { warm, after, load };
  } finally {
    await stack.stop();
  }
}

const show = (label: string, t: Turn) => console.log(`${label.padEnd(34)} time to first token ${t.ttftMs.toFixed(0).padStart(6)} ms, prompt_n ${t.promptN}`);
const withCache = await run(true);
const without = await run(false);
show("warm (runner kept)", withCache.warm);
show("resumed (unloaded, restored)", withCache.after);
show("cold (cache off)", without.after);
show("load + 'hi' (cache on / off)", withCache.load);
show("", without.load);
console.log(`resumed / warm ${(withCache.after.ttftMs / withCache.warm.ttftMs).toFixed(2)}, cold / resumed ${(without.after.ttftMs / withCache.after.ttftMs).toFixed(2)}`);
console.log(`resumed less its load / warm ${((withCache.after.ttftMs - withCache.load.ttftMs) / withCache.warm.ttftMs).toFixed(2)}`);

import { estimateMemory, shapeOf } from "../../src/scheduler/memory/estimate.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { startStack, type Stack } from "./harness.ts";

// The stack the memory tests (memory.test.ts, fit.test.ts) run against: tiny models pulled from a
// real registry, real llama-server runners, one slot each, and a memory budget of two and a half
// tiny runners (the runner count is no limit here). `ai/long` is the tiny model with a trained
// context of 65536 tokens, which never fits whole; `ai/huge` a wider one.

/** Each runner's host prompt cache counts in its cost: a small one, so that two runners still fit. */
const PROMPT_CACHE = { bytes: 1024 * 1024, checkpoints: 4 };

/** The size of a tiny model's weights. */
export const WEIGHTS = tinyLlamaGguf().length;

/** What a runner of the model whose GGUF header is `header` costs at a context size, and the budget: 2.5 runners of 512 tokens. */
export function memoryBudget(header: Parameters<typeof shapeOf>[0]) {
  const shape = shapeOf(header)!;
  const cost = (contextSize: number) => estimateMemory(shape, WEIGHTS, { contextSize, slots: 1, promptCache: PROMPT_CACHE }).total;
  return { cost, budget: Math.floor(2.5 * cost(512)) };
}

/** The stack under `budget` bytes, loading no runner with less than `minContext` tokens. */
export const startBudgetStack = (budget: number, minContext: number): Promise<Stack> =>
  startStack({
    models: ["ai/alpha", "ai/beta", "ai/gamma"],
    shaped: { "ai/long": { context: 65536 }, "ai/huge": { embedding: 1024, heads: 16, kvHeads: 4, feedForward: 2048 } },
    env: {
      INFERENCE_MAX_RUNNERS: "8",
      INFERENCE_SLOTS: "1",
      INFERENCE_MEMORY_BUDGET: String(budget),
      INFERENCE_CACHE_RAM: "1MiB",
      INFERENCE_MIN_CONTEXT: String(minContext),
    },
  });

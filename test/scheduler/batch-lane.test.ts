import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { until } from "../support/until.ts";
import { tinyLlamaGguf, tinyLlamaHeader } from "../support/tiny-gguf.ts";
import { estimateMemory, shapeOf } from "../../src/scheduler/memory/estimate.ts";

// Batch work and an interactive user on a runner that holds one model, end to end: the server as
// users run it, tiny models pulled from a real registry, real llama-server runners, a memory budget
// of one and a half tiny models (so a second model loads only once the first is unloaded), and a
// batch of the official OpenAI client. The user chats with alpha in turns; a batch line asks for
// beta. The batch line must not take alpha from the user while the user's last turn is recent
// (INFERENCE_BATCH_EVICT_AFTER), and must be served once it is not.

const SHAPE = shapeOf({ ...tinyLlamaHeader(65536), "llama.attention.head_count_kv": "4" })!;
// Each runner's host prompt cache counts in its cost: a small one.
const PROMPT_CACHE = { bytes: 1024 * 1024, checkpoints: 4 };
const cost = (contextSize: number) => estimateMemory(SHAPE, tinyLlamaGguf().length, { contextSize, slots: 1, promptCache: PROMPT_CACHE }).total;
const KEPT_FOR = 5_000;
/** The user's pause between two turns: well within KEPT_FOR, as a person reading an answer is. */
const PAUSE_MS = 300;

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    models: ["ai/alpha", "ai/beta"],
    env: { INFERENCE_MAX_RUNNERS: "8", INFERENCE_SLOTS: "1", INFERENCE_MEMORY_BUDGET: String(Math.floor(1.5 * cost(512))), INFERENCE_CACHE_RAM: "1MiB", INFERENCE_MIN_CONTEXT: "1024", INFERENCE_BATCH_EVICT_AFTER: `${KEPT_FOR}ms` },
  });
});
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
const client = () => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
const turn = (model: string, n: number) => ask(tcp(), "POST", "/v1/chat/completions", { model, messages: [{ role: "user", content: `turn ${n}` }], max_tokens: 4 });
const short = (name: string) => name.replace(/^(.*\/)?ai\//, "").replace(/:latest$/, "");
const loaded = async () => ((await ask(tcp(), "GET", "/engines/ps")).json() as { model_name: string }[]).map((r) => short(r.model_name)).sort();
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function submitLine(model: string) {
  const line = { custom_id: "line-1", method: "POST", url: "/v1/chat/completions", body: { model, messages: [{ role: "user", content: "hello" }], max_tokens: 4 } };
  const file = await client().files.create({ file: await toFile(Buffer.from(JSON.stringify(line) + "\n"), "batch.jsonl"), purpose: "batch" });
  return client().batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
}

describe("batch work beside an interactive user, on a budget that holds one model", () => {
  it("keeps the user's runner while their last turn is recent, and serves the batch line for the other model once it is not", async () => {
    expect((await turn("ai/alpha", 0)).status).toBe(200);
    expect(await loaded()).toEqual(["alpha"]);
    const [alphaPid] = await stack.runnerPids();
    const batch = await submitLine("ai/beta");

    // The user goes on talking: each turn is served by the same alpha runner, never reloaded, and
    // the batch line waits (beta is not loaded, nothing is done).
    for (let n = 1; n <= 8; n++) {
      await pause(PAUSE_MS);
      expect((await turn("ai/alpha", n)).status).toBe(200);
      expect(await loaded()).toEqual(["alpha"]);
      expect(await stack.runnerPids()).toEqual([alphaPid]);
    }
    const meanwhile = await client().batches.retrieve(batch.id);
    expect(meanwhile.status).toBe("in_progress");
    expect(meanwhile.request_counts).toMatchObject({ completed: 0, failed: 0 });

    // The user leaves: once alpha has been left alone long enough, the line evicts it and is served.
    await until(async () => (await client().batches.retrieve(batch.id)).status === "completed", "the batch to complete");
    const done = await client().batches.retrieve(batch.id);
    expect(done.request_counts).toMatchObject({ total: 1, completed: 1, failed: 0 });
    const [result] = (await (await client().files.content(done.output_file_id!)).text()).split("\n").filter(Boolean).map((l) => JSON.parse(l));
    expect(result).toMatchObject({ custom_id: "line-1", response: { status_code: 200, body: { model: expect.stringContaining("ai/beta") } }, error: null });
    expect(await loaded()).toEqual(["beta"]);
    expect(await stack.runnerPids()).not.toContain(alphaPid);
  });
});

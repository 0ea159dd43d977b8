import { availableParallelism } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { until } from "../support/until.ts";
import { ask } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// B17.2, end to end: runners share the cores. Each llama-server used to take every core, so two
// of them spun against each other. The first runner gets the cores; when a second loads, each
// gets its share, and the first is replaced (after its requests) to run with its share.

let stack: Stack;
beforeAll(async () => {
  // INFERENCE_THREADS unset: threads come from the cores (this machine's, as the server sees them).
  stack = await startStack({ models: ["ai/alpha", "ai/beta"], env: { INFERENCE_THREADS: "" } });
});
afterAll(async () => {
  await stack?.stop();
});

const cores = availableParallelism();
const share = Math.max(1, Math.floor(cores / 2));
const chat = (model: string) => ({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2, ...NO_EARLY_STOP });
const ps = async () =>
  ((await ask({ url: stack.url }, "GET", "/engines/ps")).json() as { model_name: string; state: string; threads: number }[])
    .filter((r) => r.state === "ready")
    .map((r) => [r.model_name.replace(/^.*ai\//, ""), r.threads])
    .sort();

describe("runners share the cores", () => {
  it("one runner alone gets every core; with a second each gets its share, the first reloaded with it", async () => {
    expect((await ask({ url: stack.url }, "POST", "/v1/chat/completions", chat("ai/alpha"))).status).toBe(200);
    expect(await ps()).toEqual([["alpha:latest", cores]]);
    expect((await ask({ url: stack.url }, "POST", "/v1/chat/completions", chat("ai/beta"))).status).toBe(200);
    if (share < cores) await until(async () => (await ps()).length === 1, "alpha to be replaced");
    expect((await ask({ url: stack.url }, "POST", "/v1/chat/completions", chat("ai/alpha"))).status).toBe(200);
    expect(await ps()).toEqual([["alpha:latest", share], ["beta:latest", share]]);
    // llama-server itself says how many threads it computes with.
    expect(await stack.runnerLogs()).toMatch(new RegExp(`threadpool init, n_threads = ${share}\\b`));
  });
});

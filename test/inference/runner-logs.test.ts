import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { startStack, type Stack } from "./harness.ts";

// Runner logs (`GET /engines/logs`) over loads, reloads and a restart of the server: one log per
// load, at most INFERENCE_LOGS_KEPT of them (a live runner's always kept), each mode's askable,
// and after a restart the log of this run's runner, not of the previous run's.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"], rerankers: ["ai/reranker"], env: { INFERENCE_LOGS_KEPT: "3" } });
});
afterAll(async () => {
  await stack?.stop();
});

const logNames = async () => (await readdir(join(stack.dir, "logs"))).filter((name) => name.endsWith(".log"));
const complete = () => ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "x", max_tokens: 1 });
const logOf = (query: string) => ask({ url: stack.url }, "GET", `/engines/logs?${query}`);
/** The time a log's runner was started at, from its first line (`--- <ISO time> llama-server ...`). */
const startedAt = (log: string) => Date.parse(/^--- (\S+) llama-server/.exec(log)![1]!);

describe("runner logs", () => {
  it("answers the reranking mode's log", async () => {
    expect((await ask({ url: stack.url }, "POST", "/v1/rerank", { model: "ai/reranker", query: "q", documents: ["a", "b"] })).status).toBe(200);
    const log = await logOf("model=ai/reranker&mode=reranking");
    expect(log.status).toBe(200);
    expect(log.body).toMatch(/^--- \S+ llama-server .* --rerank/);
    expect((await logOf("model=ai/reranker&mode=sideways")).json().error.code).toBe("invalid_mode");
  });

  it("keeps at most INFERENCE_LOGS_KEPT logs, the oldest going first, a live runner's never", async () => {
    const reranker = (await logNames())[0]!;
    for (const contextSize of [512, 768, 1024, 1280]) {
      const configured = await ask({ url: stack.url }, "POST", "/engines/_configure", { model: "ai/tiny", "context-size": contextSize });
      expect(configured.status).toBe(202);
      expect((await complete()).status).toBe(200);
    }
    const names = await logNames();
    expect(names).toHaveLength(3);
    // The reranker's runner is still loaded: its log is the oldest, and stays.
    expect(names).toContain(reranker);
    expect((await logOf("model=ai/tiny")).body).toContain("--ctx-size 1280");
  });

  it("shows this run's log after a restart, not the previous run's", async () => {
    const before = await logOf("model=ai/tiny");
    const restartedAt = Date.now();
    await stack.restart();
    expect((await complete()).status).toBe(200);
    const after = await logOf("model=ai/tiny");
    expect(after.status).toBe(200);
    expect(startedAt(before.body)).toBeLessThan(restartedAt);
    expect(startedAt(after.body)).toBeGreaterThanOrEqual(restartedAt);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// Regression (B17.1): llama-server closes the connection after a streamed answer although it
// announced keep-alive; the runtime's pool handed that dead connection to the next request, which
// failed with 502 runner_failed "lost the connection (ECONNRESET)" with every runner alive, after
// a fixed second's wait for an exit that never came. Streamed and plain requests interleaved on
// one runner, several at once: every one must succeed, under each runtime.

const REQUESTS = 240;
const CONCURRENCY = 6;

describe.each(["bun", "node", "deno"] as const)("streamed and plain requests interleaved under %s", (runtime) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ runtime, models: ["ai/tiny"] });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it(`${REQUESTS} requests, none fails`, async () => {
    const failures: string[] = [];
    let next = 0;
    const worker = async () => {
      while (next < REQUESTS) {
        const i = next++;
        const stream = i % 2 === 0;
        const path = i % 3 === 0 ? "/v1/completions" : "/v1/chat/completions";
        const body = {
          model: "ai/tiny",
          max_tokens: 2,
          ...NO_EARLY_STOP,
          stream,
          ...(path === "/v1/completions" ? { prompt: "a" } : { messages: [{ role: "user", content: "a" }] }),
        };
        const answer = await ask({ url: stack.url }, "POST", path, body);
        const complete = stream ? answer.body.trimEnd().endsWith("data: [DONE]") : answer.status === 200 && !!answer.json().choices;
        if (answer.status !== 200 || !complete) failures.push(`${i} ${stream ? "stream" : "plain"}: ${answer.status} ${answer.body.slice(0, 200)}`);
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    expect(failures).toEqual([]);
  });
});

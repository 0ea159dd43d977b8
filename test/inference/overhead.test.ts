import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// x-llamadock-overhead-ms: what our process spent on a request outside the runner. One slot and no
// hand-ahead, so that a second request waits in our queue for the first: that wait is the runner's
// capacity, not our overhead, and must not show in the header.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"], env: { INFERENCE_SLOTS: "1", INFERENCE_RUNNER_QUEUE: "0" } });
  await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "warm", max_tokens: 1 });
});
afterAll(async () => {
  await stack?.stop();
});

const overhead = (headers: Record<string, unknown>) => Number(headers["x-llamadock-overhead-ms"]);

describe("the overhead header", () => {
  it("comes with a whole answer and with a stream, a number of milliseconds below the request's own time", async () => {
    const began = performance.now();
    const whole = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    const took = performance.now() - began;
    expect(whole.status).toBe(200);
    expect(whole.headers["x-llamadock-overhead-ms"]).toMatch(/^\d+\.\d\d$/);
    expect(overhead(whole.headers)).toBeLessThan(took);
    const stream = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2, stream: true });
    expect(stream.headers["x-llamadock-overhead-ms"]).toMatch(/^\d+\.\d\d$/);
  });

  it("leaves out the wait for a slot and the runner's own time", async () => {
    const long = { model: "ai/tiny", prompt: "a long one", max_tokens: 400, ...NO_EARLY_STOP };
    const first = ask({ url: stack.url }, "POST", "/v1/completions", long);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const began = performance.now();
    const second = await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "short", max_tokens: 1 });
    const took = performance.now() - began;
    const firstAnswer = await first;
    expect(firstAnswer.json().usage.completion_tokens).toBe(400);
    // The second waited behind 400 tokens of the first: most of its time is that wait.
    expect(overhead(second.headers)).toBeLessThan(took / 2);
    expect(overhead(firstAnswer.headers)).toBeLessThan(took / 2);
  });
});

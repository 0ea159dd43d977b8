import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./harness.ts";

// Regression: on Bun, a streamed chat completion asked over the Unix socket, whose prompt took
// llama-server longer to process than the header timeout, was cut with ECONNRESET (the same request
// over TCP completed). `llamadock launch` relays the coding agents to the socket, and their first
// prompts take minutes on a CPU. Here the header timeout is 1 s and the prompt takes longer.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: [], shaped: { "ai/tiny": { context: 65536 } }, env: { HTTP_HEADERS_TIMEOUT_MS: "1000", INFERENCE_SLOTS: "1" } });
  const configured = await fetch(`${stack.url}/engines/_configure`, { method: "POST", body: JSON.stringify({ model: "ai/tiny", "context-size": 65536 }) });
  if (configured.status !== 202) throw new Error(`configure: ${configured.status} ${await configured.text()}`);
}, 120_000);
afterAll(() => stack?.stop());

function streamOverSocket(socketPath: string, body: unknown): Promise<{ status: number; text: string; error?: string }> {
  return new Promise((resolve) => {
    const outgoing = request({ socketPath, path: "/exp/vDD4.40/engines/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" } }, (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (text += chunk));
      response.once("end", () => resolve({ status: response.statusCode ?? 0, text }));
      response.once("error", (error) => resolve({ status: response.statusCode ?? 0, text, error: error.message }));
    });
    outgoing.once("error", (error) => resolve({ status: 0, text: "", error: error.message }));
    outgoing.end(JSON.stringify(body));
  });
}

describe("a stream over the Unix socket whose prompt outlasts the header timeout", () => {
  it("is answered whole", async () => {
    const prompt = "the quick brown fox jumps over the lazy dog ".repeat(900); // ~56 000 tokens: seconds of prefill on one thread
    const started = Date.now();
    const answer = await streamOverSocket(stack.socket, { model: "ai/tiny", stream: true, max_tokens: 4, messages: [{ role: "user", content: prompt }] });
    const took = Date.now() - started;
    expect(answer.error).toBeUndefined();
    expect(answer.status).toBe(200);
    expect(answer.text).toContain("data: [DONE]");
    // Not a bound on time: the test shows nothing unless the prompt outlasted the timeout.
    expect(took).toBeGreaterThan(2_000);
  }, 120_000);
});

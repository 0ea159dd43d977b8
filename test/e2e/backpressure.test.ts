import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { runnerSocket } from "../inference/runners.ts";

// A client that stops reading an SSE stream costs our process nothing: the relay pulls one chunk
// per chunk the client takes, so what the client does not read stays out of our memory. A raw
// client reads the first bytes of an endless generation with large chunks (20 token probabilities
// each), then stops reading; our RSS must stay flat while llama-server goes on producing. (It does
// go on: llama-server decouples generation from writing and queues the results in its own memory,
// about 3,000 tokens a second here, so the stall does not reach the model itself.)

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(["bun", "node"] as const)("a stalled SSE reader under %s", (runtime) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ runtime, models: ["ai/tiny"], env: { INFERENCE_SLOTS: "1" } });
    // Context shift: the generation goes on past the context, for as long as it is read.
    await ask({ url: stack.url }, "POST", "/engines/_configure", { model: "ai/tiny", "runtime-flags": ["--context-shift"] });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("leaves our memory flat while llama-server keeps producing", async () => {
    const port = Number(new URL(stack.url).port);
    const body = JSON.stringify({ model: "ai/tiny", prompt: "x", max_tokens: 1_000_000, ignore_eos: true, n_probs: 20, stream: true });
    const socket = connect(port, "127.0.0.1");
    socket.setNoDelay(true);
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await new Promise((resolve) => socket.once("data", resolve));
    socket.pause();
    const runner = await runnerSocket(stack, "ai/tiny");
    const decoded = async () => {
      const slots = (await ask(runner, "GET", "/slots")).json() as { is_processing: boolean; next_token?: { n_decoded: number }[] }[];
      expect(slots[0]!.is_processing).toBe(true);
      return slots[0]!.next_token![0]!.n_decoded;
    };
    const early = await decoded();
    // Let the buffers between llama-server and the client fill, then watch for a while.
    await sleep(3000);
    const [tokensBefore, rssBefore] = [await decoded(), rssMiB(stack.server.pid)];
    await sleep(3000);
    const [tokensAfter, rssAfter] = [await decoded(), rssMiB(stack.server.pid)];
    console.log(`${runtime}: tokens ${early} -> ${tokensBefore} -> ${tokensAfter}, our RSS ${rssBefore.toFixed(1)} -> ${rssAfter.toFixed(1)} MiB`);
    socket.destroy();
    // Thousands of ~2 KiB chunks were produced and not read: none of them in our process.
    expect(tokensAfter - tokensBefore).toBeGreaterThan(1000);
    expect(rssAfter - rssBefore).toBeLessThan(10);
  });
});

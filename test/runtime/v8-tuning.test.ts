import { afterAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { detectRuntime } from "../../src/runtime/index.ts";

// Our server under Node turns off V8's allocation-site pretenuring (src/runtime/v8-tuning.ts): once
// V8 had guessed that a site's objects live long, each request's dead objects of that site held the
// runner call, its socket and its reader through young collections, promoting them all. Whole
// completions, then streams: the control (the server started without the tuning) tenures some of
// its sites; ours judges none.

const PATH = "/exp/vDD4.40/engines/llama.cpp/v1/completions";
const stacks: Stack[] = [];
afterAll(async () => {
  await Promise.all(stacks.map((stack) => stack.stop()));
});

/**
 * What the server printed of V8's pretenuring after `whole` completions and then `streamed` streams,
 * 16 at a time: how many times it judged its sites, and how many it tenured.
 */
async function pretenuring(mode: "on" | "off", whole: number, streamed: number): Promise<{ judged: number; tenured: number }> {
  const stack = await startStack({
    runtime: "node",
    models: ["ai/tiny"],
    entry: "test/runtime/fixtures/pretenuring-entry.ts",
    env: { INFERENCE_SLOTS: "4", PRETENURING: mode },
  });
  stacks.push(stack);
  const call = (await detectRuntime()).unixFetch(stack.socket);
  // Threads for every connection at once (llama-server serves each on one), as the benches run it.
  const configure = { model: "ai/tiny", "runtime-flags": ["--threads-http", "32"] };
  await (await call("http://localhost/engines/_configure", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(configure) })).arrayBuffer();
  const send = async (count: number, stream: boolean) => {
    let next = 0;
    const body = JSON.stringify({ model: "ai/tiny", prompt: "hi", max_tokens: 1, stream });
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next++ < count) {
          const answer = await call(`http://localhost${PATH}`, { method: "POST", headers: { "content-type": "application/json" }, body });
          expect(answer.status).toBe(200);
          await answer.text();
        }
      }),
    );
  };
  await send(whole, false);
  await send(streamed, true);
  const output = stack.server.output();
  return { judged: (output.match(/pretenuring:/g) ?? []).length, tenured: (output.match(/=> tenure/g) ?? []).length };
}

describe("V8's pretenuring under Node", () => {
  it("is off in our server: no site is tenured under the load that makes the control tenure some", async () => {
    const [control, ours] = await Promise.all([pretenuring("on", 5000, 500), pretenuring("off", 5000, 500)]);
    expect(control.tenured).toBeGreaterThan(0);
    expect(ours).toEqual({ judged: 0, tenured: 0 });
  }, 240_000);
});

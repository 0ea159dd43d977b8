import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { busySlots, runnerSocket } from "../inference/runners.ts";
import { modelArtifact, startHostileRegistry, type Artifact, type HostileRegistry } from "../support/hostile-registry.ts";
import { ask } from "../support/http.ts";
import type { RuntimeName } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// Every streaming answer survives a client that leaves after its first bytes, on each runtime:
// pull progress in both shapes (DMR's and Ollama's), chat and completions streams in every
// dialect, the live-state events and a followed log. Afterwards the server still answers, a
// departed client's pull was cancelled (its download dropped), and a later pull of the same model
// completes. Regression: under Bun an abandoned `POST /api/pull` took the whole server down
// (ERR_INVALID_STATE from closing the cancelled progress stream when the pull ended).

/** Generations that would run for long: the client leaves long before their end. */
const LONG = { max_tokens: 100_000, ignore_eos: true, stream: true };

const STREAMS: [string, string, string, object?][] = [
  ["OpenAI chat", "POST", "/v1/chat/completions", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], ...LONG }],
  ["OpenAI completions", "POST", "/engines/llama.cpp/v1/completions", { model: "ai/tiny", prompt: "x", ...LONG }],
  ["Anthropic messages", "POST", "/anthropic/v1/messages", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], ...LONG }],
  ["Responses", "POST", "/v1/responses", { model: "ai/tiny", input: "hi", max_output_tokens: 100_000, stream: true }],
  ["Ollama chat", "POST", "/api/chat", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], options: { num_predict: 100_000 } }],
  ["Ollama generate", "POST", "/api/generate", { model: "ai/tiny", prompt: "x", options: { num_predict: 100_000 } }],
  ["live-state events", "GET", "/engines/events"],
  ["followed log", "GET", "/engines/logs?model=ai/tiny&follow=true"],
];

/**
 * Opens `path`, waits for the answer's first body bytes (or, with `ready`, until what came satisfies
 * it), then drops the connection, as Ctrl-C does.
 */
function leaveAfterFirstBytes(url: string, method: string, path: string, body?: object, ready = (_: string) => true): Promise<{ status: number; first: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const outgoing = request({ host: hostname, port, method, path, agent: false, headers: body ? { "content-type": "application/json" } : {} });
    outgoing.once("error", reject);
    outgoing.once("response", (response) => {
      let text = "";
      response.on("data", (chunk: Buffer) => {
        text += chunk.toString("utf8");
        if (!ready(text) || outgoing.destroyed) return;
        outgoing.destroy();
        resolve({ status: response.statusCode ?? 0, first: text });
      });
      response.once("end", () => reject(new Error(`${path} ended before the client left: ${text}`)));
    });
    outgoing.end(body ? JSON.stringify(body) : undefined);
  });
}

describe.each<RuntimeName>(["bun", "node", "deno"])("clients that leave, under %s", (runtime) => {
  let stack: Stack;
  let registry: HostileRegistry;
  let big: Artifact;
  beforeAll(async () => {
    registry = await startHostileRegistry();
    big = modelArtifact("ai/big", "latest", tinyLlamaGguf({ seed: 7 }));
    registry.add(big);
    stack = await startStack({ runtime, models: ["ai/tiny"] });
  });
  afterAll(async () => {
    await stack?.stop();
    await registry?.stop();
  });

  const alive = () => stack.server.child.exitCode === null && stack.server.child.signalCode === null;
  const pulls = async () => (await ask({ url: stack.url }, "GET", "/engines/state")).json().pulls as unknown[];

  it("survives each stream dropped after its first bytes, and its work stops", async () => {
    for (const [name, method, path, body] of STREAMS) {
      const { status, first } = await leaveAfterFirstBytes(stack.url, method, path, body);
      expect([name, status, first.length > 0], first).toEqual([name, 200, true]);
    }
    // The generations left behind stop: no slot of the runner stays busy.
    const runner = await runnerSocket(stack, "ai/tiny");
    await until(async () => (await busySlots(runner)) === 0, "the abandoned generations to stop");

    // The registry sends slowly, so each client leaves while its pull streams progress.
    registry.misbehaviour = { blobs: { [big.weights.digest]: { bytesPerSecond: 20_000 } } };
    const from = `${registry.host}/ai/big`;
    for (const [path, body] of [["/models/create", { from }], ["/api/pull", { model: from }]] as const) {
      const before = registry.abandoned.length;
      // Once a line shows downloaded bytes, the download is under way (Ollama's first line comes before it).
      const { status, first } = await leaveAfterFirstBytes(stack.url, "POST", path, body, (text) => text.includes(big.weights.digest));
      expect([path, status]).toEqual([path, 200]);
      expect(first).toMatch(/^\{/);
      // Leaving cancels the pull: its download is dropped, and it is no longer in progress.
      await until(() => registry.abandoned.length > before, `the download of ${path}'s pull to be dropped`);
      await until(async () => (await pulls()).length === 0, `${path}'s pull to be cancelled`);
    }

    // A pull's end after its client left was what killed Bun: give every callback its turn.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(alive()).toBe(true);
    expect((await ask({ url: stack.url }, "GET", "/models")).status).toBe(200);
    const chat = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    expect(chat.status).toBe(200);

    // The same model pulls to the end once the registry sends it whole, in both shapes.
    registry.misbehaviour = {};
    const ollama = await ask({ url: stack.url }, "POST", "/api/pull", { model: from, stream: false });
    expect([ollama.status, ollama.json()]).toEqual([200, { status: "success" }]);
    const dmr = await ask({ url: stack.url }, "POST", "/models/create", { from });
    expect(dmr.body.trim().split("\n").at(-1)).toContain('"type":"success"');
    expect((await ask({ url: stack.url }, "GET", `/models/${from}`)).status).toBe(200);

    // Nobody's departure is an error of ours.
    const metrics = (await ask({ url: stack.url }, "GET", "/metrics")).body;
    expect(metrics).toMatch(/^llamadock_request_errors_total 0$/m);
    expect(stack.server.output()).not.toMatch(/request error|ERR_INVALID_STATE|unhandled/i);
    expect(alive()).toBe(true);
  }, 120_000);
});

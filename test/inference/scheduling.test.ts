import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./harness.ts";
import { until } from "../support/until.ts";
import { ask, openStream } from "../support/http.ts";
import { busySlots, runnerPid, runnerSocket } from "./runners.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";

// The scheduler end to end: the server under Bun, three tiny models pulled from a real registry,
// real llama-server runners. At most 2 runners, 1 request may wait per runner. A fourth model
// carries a multimodal projector.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    models: ["ai/alpha", "ai/beta", "ai/gamma"],
    // Its projector is a language model, which llama-server refuses as one: proof it was passed.
    withProjector: { "ai/seeing": tinyLlamaGguf({ seed: 9 }) },
    // The queue under test is ours: nothing is handed ahead to llama-server's own.
    env: { INFERENCE_MAX_RUNNERS: "2", INFERENCE_QUEUE_DEPTH: "1", INFERENCE_RUNNER_QUEUE: "0", INFERENCE_BODY_LIMIT: "65536" },
  });
});
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
const CHAT = "/engines/llama.cpp/v1/chat/completions";
const COMPLETIONS = "/v1/completions";
const chat = (model: string) => ({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
/** A generation that goes on for minutes (context shift on, end of stream ignored) until stopped. */
const endless = (model: string, stream = true) => ({ model, prompt: "x", max_tokens: 1_000_000, ignore_eos: true, stream });
const configure = (body: object) => ask(tcp(), "POST", "/engines/_configure", body);
const ps = async () => (await ask(tcp(), "GET", "/engines/ps")).json() as { model_name: string; mode: string; in_use: boolean }[];
const loaded = async () => (await ps()).map((r) => r.model_name.replace(/^(.*\/)?ai\//, "")).sort();
const unloadAll = () => ask(tcp(), "POST", "/engines/unload", { all: true });
const metrics = async () => (await ask(tcp(), "GET", "/metrics")).body;

describe("scheduling", () => {
  it("shares one load between concurrent requests", async () => {
    const answers = await Promise.all([1, 2, 3, 4].map(() => ask(tcp(), "POST", CHAT, chat("ai/alpha"))));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    expect(await metrics()).toMatch(/llamadock_runner_loads_total\{model="[^"]*ai\/alpha:latest",mode="completion",result="ok"\} 1\n/);
    expect(await loaded()).toEqual(["alpha:latest"]);
  });

  it("answers 503 with Retry-After at once when the queue is full, and serves the queued one later", async () => {
    expect((await configure({ model: "ai/beta", slots: 1, "runtime-flags": ["--context-shift"] })).status).toBe(202);
    const holder = openStream(tcp(), COMPLETIONS, endless("ai/beta"));
    await holder.started;
    const queued = ask(tcp(), "POST", CHAT, chat("ai/beta"));
    await until(async () => /llamadock_queue_depth\{model="[^"]*ai\/beta:latest",mode="completion"\} 1\n/.test(await metrics()), "a queued request");
    const refused = await ask(tcp(), "POST", CHAT, chat("ai/beta"));
    expect(refused.status).toBe(503);
    expect(refused.headers["retry-after"]).toBe("1");
    expect(refused.json().error).toMatchObject({ type: "unavailable_error", code: "queue_full" });
    holder.hangUp();
    expect((await queued).status).toBe(200);
  });

  it("frees the llama-server slot when the client hangs up", async () => {
    const stream = openStream(tcp(), COMPLETIONS, endless("ai/beta"), 3);
    await stream.started;
    const runner = await runnerSocket(stack, "ai/beta");
    expect(await busySlots(runner)).toBe(1);
    stream.hangUp();
    await until(async () => (await busySlots(runner)) === 0, "the slot to be freed");
    await until(async () => (await ps()).every((r) => !r.in_use), "the lease to be released");
  });

  it("answers a runner killed mid-stream with an error event, and a fresh runner serves the next request", async () => {
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const stream = await client.completions.create(endless("ai/beta") as OpenAI.CompletionCreateParamsStreaming);
    const pid = await runnerPid(stack, "ai/beta");
    let chunks = 0;
    const failure = (async () => {
      for await (const _ of stream) if (++chunks === 3) process.kill(pid, "SIGKILL");
    })();
    await expect(failure).rejects.toThrow(/runner of model \S*ai\/beta:latest failed/);
    const next = await ask(tcp(), "POST", CHAT, chat("ai/beta"));
    expect(next.status).toBe(200);
    expect(await runnerPid(stack, "ai/beta")).not.toBe(pid);
    expect(await metrics()).toMatch(/llamadock_runner_crashes_total\{model="[^"]*ai\/beta:latest",mode="completion"\} 1\n/);
  });

  it("answers 502 JSON when the runner dies before answering", async () => {
    const pending = ask(tcp(), "POST", COMPLETIONS, endless("ai/beta", false));
    const runner = await runnerSocket(stack, "ai/beta");
    await until(async () => (await busySlots(runner)) === 1, "generation to start");
    process.kill(await runnerPid(stack, "ai/beta"), "SIGKILL");
    const answer = await pending;
    expect(answer.status).toBe(502);
    expect(answer.json().error).toMatchObject({ type: "upstream_error", code: "runner_failed" });
    // The death itself is named (seen from the OS at once), not a lost connection.
    expect(answer.json().error.message).toMatch(/SIGKILL/);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/beta"))).status).toBe(200);
  });

  it("unloads the least recently used idle runner to load another, never one in use", async () => {
    await unloadAll();
    for (const model of ["ai/gamma", "ai/beta", "ai/gamma", "ai/alpha"]) {
      expect((await ask(tcp(), "POST", CHAT, chat(model))).status).toBe(200);
    }
    expect(await loaded()).toEqual(["alpha:latest", "gamma:latest"]);
    await unloadAll();
    // beta is loaded first, so it is the least recently used, but it stays in use.
    const holder = openStream(tcp(), COMPLETIONS, endless("ai/beta"));
    await holder.started;
    expect((await ask(tcp(), "POST", CHAT, chat("ai/alpha"))).status).toBe(200);
    expect(await loaded()).toEqual(["alpha:latest", "beta:latest"]);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/gamma"))).status).toBe(200);
    expect(await loaded()).toEqual(["beta:latest", "gamma:latest"]);
    holder.hangUp();
  });

  it("unloads an idle runner after its keep-alive (per model, 0 at once)", async () => {
    await until(async () => (await ps()).every((r) => !r.in_use), "idle runners");
    expect((await configure({ model: "ai/gamma", keep_alive: "1s" })).status).toBe(202);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/gamma"))).status).toBe(200);
    // The default keep-alive is 5 minutes: only the model's own 1 s unloads it within the wait.
    await until(async () => !(await loaded()).includes("gamma:latest"), "gamma to unload");
    expect((await configure({ model: "ai/gamma", keep_alive: 0 })).status).toBe(202);
    expect((await ask(tcp(), "POST", CHAT, chat("ai/gamma"))).status).toBe(200);
    await until(async () => !(await loaded()).includes("gamma:latest"), "gamma to unload at once");
  });

  it("keeps per-model settings across an unload and a restart", async () => {
    const long = { model: "ai/alpha", prompt: "a".repeat(300), max_tokens: 1 };
    // One slot has the whole context of 512 tokens: the prompt fits.
    expect((await configure({ model: "ai/alpha", slots: 1 })).status).toBe(202);
    expect((await ask(tcp(), "POST", COMPLETIONS, long)).status).toBe(200);
    expect((await configure({ model: "ai/alpha", "context-size": 256, slots: 1 })).status).toBe(202);
    const tooLong = async () => {
      const answer = await ask(tcp(), "POST", COMPLETIONS, long);
      expect(answer.status).toBe(400);
      // llama-server's own error, passed through as it is.
      expect(answer.json().error).toMatchObject({ type: "exceed_context_size_error", n_ctx: 256 });
    };
    await tooLong();
    await until(async () => (await ps()).every((r) => !r.in_use), "idle runners");
    expect((await unloadAll()).json().unloaded_runners).toBeGreaterThan(0);
    await tooLong();
    const before = await stack.runnerPids();
    expect(before.length).toBeGreaterThan(0);
    await stack.restart();
    // The server stopped its runners on SIGTERM.
    expect((await stack.runnerPids()).filter((pid) => before.includes(pid))).toEqual([]);
    await tooLong();
  });

  it("unloads a model's runners before deleting it; refuses while it serves", async () => {
    expect((await ask(tcp(), "POST", CHAT, chat("ai/gamma"))).status).toBe(200);
    expect((await configure({ model: "ai/gamma", keep_alive: "-1", slots: 1, "runtime-flags": ["--context-shift"] })).status).toBe(202);
    const holder = openStream(tcp(), COMPLETIONS, endless("ai/gamma"));
    await holder.started;
    expect((await ask(tcp(), "DELETE", "/models/ai/gamma")).status).toBe(409);
    holder.hangUp();
    await until(async () => (await ps()).every((r) => !r.in_use), "idle runners");
    const pid = await runnerPid(stack, "ai/gamma");
    expect((await ask(tcp(), "DELETE", "/models/ai/gamma")).status).toBe(200);
    expect(await loaded()).not.toContain("gamma:latest");
    expect(() => process.kill(pid, 0)).toThrow();
    expect((await ask(tcp(), "POST", CHAT, chat("ai/gamma"))).status).toBe(404);
  });

  it("starts a model's runner with its multimodal projector; a broken one is a clear 503 and nothing else suffers", async () => {
    const answer = await ask(tcp(), "POST", CHAT, chat("ai/seeing"));
    expect(answer.status).toBe(503);
    expect(answer.json().error).toMatchObject({ code: "model_load_failed", message: expect.stringMatching(/cannot load the multimodal projector \/\S+/) });
    expect(await loaded()).not.toContain("seeing:latest");
    expect((await ask(tcp(), "POST", CHAT, chat("ai/alpha"))).status).toBe(200);
  });
});

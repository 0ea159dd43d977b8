import { Ollama } from "ollama";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { until } from "../support/until.ts";
import { startStack, type Stack } from "./harness.ts";
import { bulkyChat, pausedStream } from "../support/paused-stream.ts";

// Ollama's /api with the official client (ollama-js), the server under Bun, real runners and
// models pulled from the test registry.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"], embedders: ["ai/embedder"], unpulled: ["ai/later"] });
});
afterAll(async () => {
  await stack?.stop();
});

const client = () => new Ollama({ host: stack.url });
// Random weights may stop at once: generation is made to run its course.
const options = { num_predict: 4, temperature: 0, seed: 1 };

describe("the model API", () => {
  it("version answers an Ollama API version", async () => {
    expect((await client().version()).version).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it("list shows each pulled model with its size, digest and details", async () => {
    const { models } = await client().list();
    const tiny = models.find((m) => m.name === "ai/tiny:latest");
    expect(tiny).toMatchObject({ model: "ai/tiny:latest", details: { format: "gguf", family: "llama" } });
    expect(tiny!.size).toBeGreaterThan(100_000);
    expect(tiny!.digest).toMatch(/^[0-9a-f]{64}$/);
    expect(models.map((m) => m.name)).toContain("ai/embedder:latest");
  });

  it.each(["tiny", "tiny:latest", "ai/tiny", "ai/tiny:latest"])("show finds %s as Ollama clients name it", async (model) => {
    const shown = await client().show({ model });
    expect(shown.details.family).toBe("llama");
    expect(shown.capabilities).toContain("completion");
    expect((shown.model_info as unknown as Record<string, unknown>)["llama.context_length"]).toBe(512);
  });

  it("show tells an embedding model by its capabilities", async () => {
    expect((await client().show({ model: "ai/embedder" })).capabilities).toEqual(["embedding"]);
  });

  it("pull streams Ollama's progress lines, then success; the model is listed", async () => {
    const statuses: string[] = [];
    let layer: { digest: string; total: number; completed: number } | undefined;
    for await (const progress of await client().pull({ model: "ai/later", stream: true })) {
      statuses.push(progress.status);
      if (progress.digest) layer = progress;
    }
    expect(statuses[0]).toBe("pulling manifest");
    expect(statuses.at(-1)).toBe("success");
    expect(statuses.some((s) => /^pulling [0-9a-f]{12}$/.test(s))).toBe(true);
    expect(layer!.digest).toMatch(/^sha256:/);
    expect(layer!.completed).toBe(layer!.total);
    expect((await client().list()).models.map((m) => m.name)).toContain("ai/later:latest");
    // Not streamed: one answer at the end.
    expect(await client().pull({ model: "ai/later" })).toEqual({ status: "success" });
  });

  it("copy adds a name; delete removes one", async () => {
    await client().copy({ source: "ai/tiny", destination: "mine/tiny:v1" });
    expect((await client().show({ model: "mine/tiny:v1" })).details.family).toBe("llama");
    await client().delete({ model: "mine/tiny:v1" });
    const names = (await client().list()).models.map((m) => m.name);
    expect(names).not.toContain("mine/tiny:v1");
    expect(names).toContain("ai/tiny:latest");
  });

  it("errors come in Ollama's shape, and the client raises them", async () => {
    await expect(client().show({ model: "ai/absent" })).rejects.toMatchObject({ status_code: 404 });
    await expect(client().delete({ model: "ai/absent" })).rejects.toMatchObject({ status_code: 404 });
    await expect(client().pull({ model: "ai/nowhere" })).rejects.toMatchObject({ name: "ResponseError" });
    const bad = await ask({ url: stack.url }, "POST", "/api/chat", "{not json");
    expect([bad.status, typeof bad.json().error]).toEqual([400, "string"]);
    const noModel = await ask({ url: stack.url }, "POST", "/api/generate", { prompt: "x" });
    expect(noModel.status).toBe(400);
    expect(noModel.json().error).toContain("model is required");
    const badKeep = await ask({ url: stack.url }, "POST", "/api/chat", { model: "ai/tiny", messages: [], keep_alive: "soon" });
    expect(badKeep.status).toBe(400);
  });
});

describe("inference", () => {
  it("chat answers with a message, done, and Ollama's counters", async () => {
    const answer = await client().chat({ model: "tiny", messages: [{ role: "user", content: "hello" }], options });
    expect(answer.message.role).toBe("assistant");
    expect(answer).toMatchObject({ model: "tiny", done: true, done_reason: "length", eval_count: 4 });
    expect(answer.prompt_eval_count).toBeGreaterThan(0);
    expect(answer.total_duration).toBeGreaterThanOrEqual(answer.eval_duration);
    expect(answer.eval_duration).toBeGreaterThan(0);
  });

  it("chat streams pieces, then one done line with the counters", async () => {
    const parts: string[] = [];
    let last: Awaited<ReturnType<Ollama["chat"]>> | undefined;
    for await (const part of await client().chat({ model: "ai/tiny", messages: [{ role: "user", content: "hello" }], stream: true, options })) {
      if (part.done) last = part;
      else parts.push(part.message.content);
    }
    expect(parts.length).toBeGreaterThan(0);
    expect(last).toMatchObject({ done: true, done_reason: "length", eval_count: 4 });
    expect(last!.prompt_eval_duration).toBeGreaterThan(0);
  });

  it("the same conversation through /api/chat and /v1/chat/completions gives the same text", async () => {
    const messages = [{ role: "user", content: "same" }];
    const ours = await client().chat({ model: "ai/tiny", messages, options });
    const openai = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/tiny", messages, max_tokens: 4, temperature: 0, seed: 1 });
    expect(ours.message.content).toBe(openai.json().choices[0].message.content);
  });

  it("generate answers a prompt, streamed and not; raw goes to the prompt as it is", async () => {
    const whole = await client().generate({ model: "ai/tiny", prompt: "once upon", options });
    expect(whole).toMatchObject({ done: true, eval_count: 4 });
    expect(typeof whole.response).toBe("string");
    // Streamed, the pieces are what the OpenAI stream of the same chat carries (random weights write
    // broken UTF-8, which a stream splits differently from a whole answer).
    let text = "";
    for await (const part of await client().generate({ model: "ai/tiny", prompt: "once upon", stream: true, options })) text += part.response;
    const sse = await ask({ url: stack.url }, "POST", "/v1/chat/completions", {
      model: "ai/tiny", messages: [{ role: "user", content: "once upon" }], max_tokens: 4, temperature: 0, seed: 1, stream: true,
    });
    const deltas = sse.body.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content ?? "");
    expect(text).toBe(deltas.join(""));
    const raw = await client().generate({ model: "ai/tiny", prompt: "once upon", raw: true, options });
    const completion = await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "once upon", max_tokens: 4, temperature: 0, seed: 1 });
    expect(raw.response).toBe(completion.json().choices[0].text);
  });

  it("embed and embeddings", async () => {
    const { embeddings } = await client().embed({ model: "ai/embedder", input: ["one", "two"] });
    expect(embeddings).toHaveLength(2);
    expect(embeddings[0]).toHaveLength(64);
    const { embedding } = await client().embeddings({ model: "ai/embedder", prompt: "one" });
    expect(embedding).toHaveLength(64);
    embedding.forEach((value, i) => expect(value).toBeCloseTo(embeddings[0]![i]!, 4));
  });

  it("ps shows the loaded models; keep_alive 0 with an empty prompt unloads one", async () => {
    await client().generate({ model: "ai/tiny", prompt: "x", options: { num_predict: 1 } });
    const loaded = (await client().ps()).models.find((m) => m.name === "ai/tiny:latest");
    expect(loaded).toMatchObject({ model: "ai/tiny:latest", size: expect.any(Number) });
    expect(Date.parse(String(loaded!.expires_at))).toBeGreaterThan(Date.now());
    const unloaded = await client().generate({ model: "ai/tiny", prompt: "", keep_alive: 0 });
    expect(unloaded.done_reason).toBe("unload");
    expect((await client().ps()).models.map((m) => m.name)).not.toContain("ai/tiny:latest");
  });

  it("a per-request keep_alive is honoured: 0 unloads the runner right after the answer", async () => {
    await client().chat({ model: "ai/tiny", messages: [{ role: "user", content: "x" }], keep_alive: 0, options: { num_predict: 1 } });
    await until(async () => !(await client().ps()).models.some((m) => m.name === "ai/tiny:latest"), "the runner unloaded");
    // -1 keeps it, shown far in the future.
    await client().chat({ model: "ai/tiny", messages: [{ role: "user", content: "x" }], keep_alive: -1, options: { num_predict: 1 } });
    const kept = (await client().ps()).models.find((m) => m.name === "ai/tiny:latest");
    expect(new Date(String(kept!.expires_at)).getUTCFullYear()).toBeGreaterThan(2100);
  });

  describe("options.num_ctx", () => {
    const saved = async () => (await ask({ url: stack.url }, "GET", "/engines/_configure?model=ai/tiny")).json();
    const context = async () => ((await ask({ url: stack.url }, "GET", "/engines/ps")).json() as { model_name: string; context_size: number }[]).filter((r) => r.model_name === "ai/tiny:latest").map((r) => r.context_size);
    const chatWith = (numCtx?: number) => client().chat({ model: "ai/tiny", messages: [{ role: "user", content: "x" }], options: { ...(numCtx ? { num_ctx: numCtx } : {}), num_predict: 1 } });

    it("sizes the runner it loads and never the saved settings, alternating or not", async () => {
      const before = await saved();
      for (const numCtx of [256, 384, 256, 384]) {
        expect((await chatWith(numCtx)).done).toBe(true);
        expect(await context()).toEqual([numCtx]);
      }
      expect(await saved()).toEqual(before);
      // A request without num_ctx takes the runner loaded, as it is: no reload.
      expect((await chatWith()).done).toBe(true);
      expect(await context()).toEqual([384]);
      expect(await stack.runnerLogs()).toMatch(/--ctx-size 256/);
    });

    it("is bounded: a huge one loads what fits, and the next plain request is served", async () => {
      const before = await saved();
      expect((await chatWith(100_000_000)).done).toBe(true);
      // No more than the trained context (512) for each of the 4 slots.
      expect(await context()).toEqual([2048]);
      expect(await saved()).toEqual(before);
      await client().generate({ model: "ai/tiny", prompt: "", keep_alive: 0 });
      expect((await chatWith()).done).toBe(true);
    });

    it("reloads for another value once the stream in flight has ended, never cutting it", async () => {
      const held = await pausedStream(stack.socket, "/v1/chat/completions", bulkyChat("ai/tiny"));
      expect((await chatWith(1024)).done).toBe(true);
      // Served by a fresh runner while the replaced one still serves the held stream.
      const runners = (await ask({ url: stack.url }, "GET", "/engines/ps")).json() as { context_size: number; state: string; in_use: boolean }[];
      expect(runners.map((r) => [r.context_size, r.state, r.in_use]).sort()).toEqual([[1024, "ready", false], [2048, "draining", true]].sort());
      const text = await held.rest();
      expect(text.trim().endsWith("data: [DONE]")).toBe(true);
      expect(text).not.toContain('"error"');
      await until(async () => (await context()).length === 1, "the replaced runner to stop");
      expect(await context()).toEqual([1024]);
    });
  });

  it("errors of inference in Ollama's shape: a model it does not have", async () => {
    await expect(client().chat({ model: "ai/absent", messages: [{ role: "user", content: "x" }] })).rejects.toMatchObject({ status_code: 404 });
    const answer = await ask({ url: stack.url }, "POST", "/api/embed", { model: "ai/embedder", input: [] });
    expect(answer.status).toBe(400);
    expect(typeof answer.json().error).toBe("string");
  });

  it("its inference requests count in /metrics as the other dialects' do, errors included", async () => {
    const metrics = (await ask({ url: stack.url }, "GET", "/metrics")).body;
    const count = (route: string, status: number) => Number(new RegExp(`^llamadock_requests_total\\{route="${route}",status="${status}"\\} (\\d+)$`, "m").exec(metrics)?.[1] ?? 0);
    const served = Object.fromEntries(["api/chat", "api/generate", "api/embed", "api/embeddings"].map((route) => [route, count(route, 200) > 0]));
    expect(served).toEqual({ "api/chat": true, "api/generate": true, "api/embed": true, "api/embeddings": true });
    expect([count("api/chat", 404), count("api/embed", 400)]).toEqual([1, 1]);
  });
});

import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./harness.ts";
import { ask, type Target } from "../support/http.ts";

// Requests that never reach a runner (each bad input), the Unix socket with the /exp/vDD4.40
// prefix, and the management endpoints; the server under Bun, the store pulled from a registry.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"], env: { INFERENCE_BODY_LIMIT: "65536" } });
});
afterAll(async () => {
  await stack?.stop();
});

const tcp = (): Target => ({ url: stack.url });
const unix = (): Target => ({ socketPath: stack.socket });
const messages = [{ role: "user", content: "hi" }];

describe("bad requests get JSON errors before anything loads", () => {
  it.each<[string, string, string | object, number, string]>([
    ["bad JSON", "/v1/chat/completions", '{"model":', 400, "invalid_json"],
    ["a JSON array", "/v1/chat/completions", "[]", 400, "invalid_request"],
    ["no model", "/v1/chat/completions", { messages }, 400, "invalid_request"],
    ["an empty model", "/engines/v1/chat/completions", { model: " ", messages }, 400, "invalid_request"],
    ["messages not an array", "/v1/chat/completions", { model: "ai/tiny", messages: "hi" }, 400, "invalid_request"],
    ["a message without a role", "/v1/chat/completions", { model: "ai/tiny", messages: [{ content: "hi" }] }, 400, "invalid_request"],
    ["a content of the wrong type", "/v1/chat/completions", { model: "ai/tiny", messages: [{ role: "user", content: 5 }] }, 400, "invalid_request"],
    ["no prompt", "/engines/llama.cpp/v1/completions", { model: "ai/tiny" }, 400, "invalid_request"],
    ["no input", "/engines/llama.cpp/v1/embeddings", { model: "ai/tiny" }, 400, "invalid_request"],
    ["a model not in the store", "/v1/chat/completions", { model: "ai/absent", messages }, 404, "model_not_found"],
    ["a malformed model name", "/v1/embeddings", { model: "ai/bad name:!", input: "x" }, 400, "invalid_reference"],
    ["a body over the limit", "/v1/chat/completions", { model: "ai/tiny", messages: [{ role: "user", content: "x".repeat(70_000) }] }, 413, "body_too_large"],
    ["an unknown engine", "/engines/vllm/v1/chat/completions", { model: "ai/tiny", messages }, 404, "not_found"],
    ["a disallowed flag", "/engines/_configure", { model: "ai/tiny", "runtime-flags": ["--model", "x.gguf"] }, 400, "invalid_settings"],
    ["a path in a flag", "/engines/_configure", { model: "ai/tiny", "runtime-flags": ["--chat-template", "/etc/passwd"] }, 400, "invalid_settings"],
    ["a bad keep_alive", "/engines/_configure", { model: "ai/tiny", keep_alive: "soon" }, 400, "invalid_request"],
    ["configuring an absent model", "/engines/_configure", { model: "ai/absent", "context-size": 128 }, 404, "model_not_found"],
    ["an unknown unload field", "/engines/unload", { everything: true }, 400, "invalid_request"],
  ])("%s", async (_, path, body, status, code) => {
    const answer = await ask(tcp(), "POST", path, body);
    expect(answer.status).toBe(status);
    expect(answer.headers["content-type"]).toMatch(/^application\/json/);
    expect(answer.json()).toEqual({ error: { message: expect.any(String), type: expect.any(String), code } });
  });

  it("refuses a chunked body once it crosses the limit", async () => {
    const outgoing = request({ host: "127.0.0.1", port: Number(new URL(stack.url).port), method: "POST", path: "/v1/completions" });
    const status = new Promise<number>((resolve, reject) => {
      outgoing.once("response", (response) => resolve(response.statusCode ?? 0));
      outgoing.once("error", reject);
    });
    // No content-length: the body comes chunked, 8 KiB at a time, 80 KiB in all.
    for (let i = 0; i < 10; i++) outgoing.write("x".repeat(8192));
    outgoing.end();
    expect(await status).toBe(413);
  });

  it("names the engine it does not know", async () => {
    const answer = await ask(tcp(), "GET", "/engines/vllm/v1/models");
    expect(answer.status).toBe(404);
    expect(answer.json().error.message).toMatch(/unknown engine: vllm/);
  });

  it("loaded nothing for any of them", async () => {
    expect((await ask(tcp(), "GET", "/engines/ps")).json()).toEqual([]);
  });
});

describe("over the Unix socket with the /exp/vDD4.40 prefix", () => {
  const P = "/exp/vDD4.40";

  it("lists and gets models", async () => {
    const list = (await ask(unix(), "GET", `${P}/engines/llama.cpp/v1/models`)).json();
    expect(list).toEqual({ object: "list", data: [expect.objectContaining({ object: "model", owned_by: "docker" })] });
    const id = list.data[0].id as string;
    const one = await ask(unix(), "GET", `${P}/engines/v1/models/ai/tiny`);
    expect(one.json()).toMatchObject({ id, object: "model" });
    expect((await ask(unix(), "GET", `${P}/v1/models/ai/absent`)).status).toBe(404);
  });

  it("chats, streams, completes and embeds", async () => {
    const chat = await ask(unix(), "POST", `${P}/engines/llama.cpp/v1/chat/completions`, { model: "ai/tiny", messages, max_tokens: 4, ignore_eos: true });
    expect(chat.status).toBe(200);
    expect(chat.json().choices[0].message.role).toBe("assistant");
    const stream = await ask(unix(), "POST", `${P}/engines/v1/chat/completions`, { model: "ai/tiny", messages, max_tokens: 4, ignore_eos: true, stream: true });
    expect(stream.headers["content-type"]).toMatch(/^text\/event-stream/);
    expect(stream.body.trimEnd().endsWith("data: [DONE]")).toBe(true);
    const completion = await ask(unix(), "POST", `${P}/v1/completions`, { model: "ai/tiny", prompt: "a", max_tokens: 2, ignore_eos: true });
    expect(completion.json().object).toBe("text_completion");
    const embedding = await ask(unix(), "POST", `${P}/v1/embeddings`, { model: "ai/tiny", input: "a" });
    expect(embedding.json().data[0].embedding).toHaveLength(64);
  });

  it("reports status, runners and metrics", async () => {
    const status = (await ask(unix(), "GET", `${P}/engines/status`)).json();
    // DMR's format, which `docker model status` parses: `Running: llama.cpp <version>`.
    expect(status).toEqual({ "llama.cpp": expect.stringMatching(/^Running: llama\.cpp \S/) });
    const ps = (await ask(unix(), "GET", `${P}/engines/ps`)).json();
    expect(ps.map((r: { mode: string }) => r.mode).sort()).toEqual(["completion", "embedding"]);
    expect(ps[0]).toEqual({
      backend_name: "llama.cpp",
      model_name: expect.stringMatching(/ai\/tiny:latest$/),
      mode: expect.any(String),
      state: "ready",
      in_use: false,
      loading: false,
      in_flight: 0,
      waiting: 0,
      last_used: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      keep_alive: "5m",
      threads: expect.any(Number),
      engine: "builtin",
      engine_version: expect.any(String),
      context_size: expect.any(Number),
      slots: 4,
      memory: {
        where: "cpu",
        total_bytes: expect.any(Number),
        weights_bytes: expect.any(Number),
        kv_cache_bytes: expect.any(Number),
        compute_bytes: expect.any(Number),
        prompt_cache_bytes: expect.any(Number),
        checkpoints_bytes: 0,
        host_bytes: 0,
      },
    });
    const metrics = await ask(unix(), "GET", `${P}/metrics`);
    expect(metrics.headers["content-type"]).toMatch(/^text\/plain/);
    expect(metrics.body).toMatch(/^llamadock_requests_total\{route="chat\/completions",status="200"\} \d+$/m);
    expect(metrics.body).toMatch(/^llamadock_requests_total\{route="chat\/completions",status="400"\} \d+$/m);
    expect(metrics.body).toMatch(/^llamadock_runner_load_seconds_count\{model="[^"]+",mode="embedding"\} 1$/m);
    // The runners' own metrics, labelled with the runner they come from.
    expect(metrics.body).toMatch(/^llamacpp:\w+\{backend="llama\.cpp",model="[^"]*ai\/tiny:latest",mode="completion"\} \S+$/m);
    expect(metrics.body).toMatch(/^llamacpp:\w+\{backend="llama\.cpp",model="[^"]*ai\/tiny:latest",mode="embedding"\} \S+$/m);
    expect(metrics.body.match(/^# TYPE llamacpp:prompt_tokens_total /gm)).toHaveLength(1);
  });

  it("unloads idle runners on request", async () => {
    const answer = await ask(unix(), "POST", `${P}/engines/unload`, { models: ["ai/tiny"] });
    expect(answer.json()).toEqual({ unloaded_runners: 2 });
    expect((await ask(unix(), "GET", `${P}/engines/ps`)).json()).toEqual([]);
  });
});

describe("token counting", () => {
  it("forwards /tokenize and /detokenize to the model's runner, and checks their bodies", async () => {
    const tokens = (await ask(unix(), "POST", "/exp/vDD4.40/tokenize", { model: "ai/tiny", content: "hi" })).json().tokens as number[];
    expect(tokens.length).toBeGreaterThan(0);
    expect((await ask({ url: stack.url }, "POST", "/detokenize", { model: "ai/tiny", tokens })).json().content).toContain("hi");
    const bad = await ask({ url: stack.url }, "POST", "/tokenize", { model: "ai/tiny" });
    expect([bad.status, bad.json().error.code]).toEqual([400, "invalid_request"]);
  });
});

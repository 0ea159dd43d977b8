import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// The official OpenAI client against our base URLs, the server running under Bun, a store pulled
// from a real registry, real llama-server runners.

let stack: Stack;
beforeAll(async () => {
  // ai/tiny declares no pooling type (as chat models); ai/embedder declares mean (as embedding models).
  stack = await startStack({ models: ["ai/tiny"], embedders: ["ai/embedder"] });
});
afterAll(async () => {
  await stack?.stop();
});

const client = (base: string) => new OpenAI({ baseURL: `${stack.url}${base}`, apiKey: "unused", maxRetries: 0 });

describe.each(["/engines/llama.cpp/v1", "/engines/v1", "/v1"])("openai client at %s", (base) => {
  it("lists models", async () => {
    const page = await client(base).models.list();
    expect(page.data.map((m) => m.id).sort()).toEqual([expect.stringMatching(/(^|\/)ai\/embedder:latest$/), expect.stringMatching(/(^|\/)ai\/tiny:latest$/)]);
    // A chat model says it answers decisions, and how (see src/models/decisions.ts); an embedder does not.
    for (const model of page.data) {
      const decisions = model.id.includes("embedder") ? {} : { capabilities: { decisions: "chat-next-token", systemone: "chat-next-token" } };
      expect(model).toEqual({ id: expect.any(String), object: "model", created: expect.any(Number), owned_by: "docker", ...decisions });
    }
  });

  it("chats", async () => {
    const completion = await client(base).chat.completions.create({
      model: "ai/tiny",
      messages: [{ role: "user", content: "hello" }],
      max_tokens: 8,
      ...NO_EARLY_STOP,
    });
    expect(completion.object).toBe("chat.completion");
    expect(completion.choices[0]!.message.role).toBe("assistant");
    expect(completion.usage!.completion_tokens).toBeGreaterThan(0);
  });

  it("streams a chat", async () => {
    const stream = await client(base).chat.completions.create({
      model: "ai/tiny",
      messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hello" }],
      max_tokens: 8,
      ...NO_EARLY_STOP,
      stream: true,
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
    expect(chunks.at(-1)!.choices[0]?.finish_reason ?? chunks.at(-2)!.choices[0]?.finish_reason).toBe("length");
  });

  it("completes", async () => {
    // Greedy, so that the answer is the same every run (a sampled one may be pieces of characters only).
    const completion = await client(base).completions.create({ model: "ai/tiny", prompt: "Once upon", max_tokens: 4, temperature: 0, ...NO_EARLY_STOP });
    expect(completion.choices[0]!.text.length).toBeGreaterThan(0);
  });

  // B14.2: a model that declares no pooling answered llama-server's 400 "Pooling type 'none' is not OAI compatible".
  it.each(["ai/tiny", "ai/embedder"])("embeds one string and a batch with %s", async (model) => {
    const one = await client(base).embeddings.create({ model, input: "one" });
    expect(one.data).toHaveLength(1);
    expect(one.data[0]!.embedding).toHaveLength(64);
    const batch = await client(base).embeddings.create({ model, input: ["one", "two", "three"] });
    expect(batch.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(batch.data.every((d) => d.embedding.length === 64 && d.embedding.every(Number.isFinite))).toBe(true);
  });

  // B14.4: answers named the model by the runner's alias (`<id>-completion-1`), which changes on every reload.
  it("names the model in answers as it is known, not by the runner, in streamed chunks too", async () => {
    const name = (await client(base).models.list()).data.find((m) => m.id.endsWith("ai/tiny:latest"))!.id;
    const chat = await client(base).chat.completions.create({ model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    expect(chat.model).toBe(name);
    const completion = await client(base).completions.create({ model: "ai/tiny", prompt: "a", max_tokens: 2 });
    expect(completion.model).toBe(name);
    const stream = await client(base).chat.completions.create({ model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3, ...NO_EARLY_STOP, stream: true });
    for await (const chunk of stream) expect(chunk.model).toBe(name);
  });
});

import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// The official OpenAI client against our base URLs, the server running under Bun, a store pulled
// from a real registry, real llama-server runners.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"] });
});
afterAll(async () => {
  await stack?.stop();
});

const client = (base: string) => new OpenAI({ baseURL: `${stack.url}${base}`, apiKey: "unused", maxRetries: 0 });

describe.each(["/engines/llama.cpp/v1", "/engines/v1", "/v1"])("openai client at %s", (base) => {
  it("lists models", async () => {
    const page = await client(base).models.list();
    expect(page.data).toEqual([
      { id: expect.stringMatching(/(^|\/)ai\/tiny:latest$/), object: "model", created: expect.any(Number), owned_by: "docker" },
    ]);
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
    const completion = await client(base).completions.create({ model: "ai/tiny", prompt: "Once upon", max_tokens: 4, ...NO_EARLY_STOP });
    expect(completion.choices[0]!.text.length).toBeGreaterThan(0);
  });

  it("embeds", async () => {
    const embeddings = await client(base).embeddings.create({ model: "ai/tiny", input: ["one", "two"] });
    expect(embeddings.data).toHaveLength(2);
    expect(embeddings.data[0]!.embedding).toHaveLength(64);
  });
});

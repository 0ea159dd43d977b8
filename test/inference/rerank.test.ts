import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { startStack, type Stack } from "./harness.ts";

// Rerank and score on a real reranker runner: a tiny Qwen3-shaped reranker GGUF (rank pooling, a
// two-label classifier head) pulled from the test registry; llama-server started with --rerank.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"], rerankers: ["ai/reranker"] });
});
afterAll(async () => {
  await stack?.stop();
});

const DOCUMENTS = ["a cat is a small animal", "paris is in france", "cats purr when happy", "the stock market fell"];

describe.each(["/rerank", "/v1/rerank", "/engines/rerank", "/engines/llama.cpp/v1/rerank", "/exp/vDD4.40/engines/llama.cpp/rerank"])("POST %s", (path) => {
  it("scores every document, best first, with the index of each", async () => {
    const answer = await ask({ url: stack.url }, "POST", path, { model: "ai/reranker", query: "what is a cat?", documents: DOCUMENTS });
    expect(answer.status).toBe(200);
    const { results, usage } = answer.json();
    expect(results.map((r: { index: number }) => r.index).toSorted()).toEqual([0, 1, 2, 3]);
    for (const result of results) expect(result.relevance_score).toBeTypeOf("number");
    const scores = results.map((r: { relevance_score: number }) => r.relevance_score);
    expect(scores).toEqual(scores.toSorted((a: number, b: number) => b - a));
    // A softmax over the two labels: a probability, and not the same for every document.
    expect(scores.every((s: number) => s > 0 && s < 1)).toBe(true);
    expect(new Set(scores).size).toBeGreaterThan(1);
    expect(usage.prompt_tokens).toBeGreaterThan(0);
  });
});

describe("rerank", () => {
  it("top_n keeps the best n", async () => {
    const all = (await ask({ url: stack.url }, "POST", "/v1/rerank", { model: "ai/reranker", query: "cat", documents: DOCUMENTS })).json().results;
    const top = (await ask({ url: stack.url }, "POST", "/v1/rerank", { model: "ai/reranker", query: "cat", documents: DOCUMENTS, top_n: 2 })).json().results;
    expect(top).toEqual(all.slice(0, 2));
  });

  it("runs on its own runner, in the reranking mode", async () => {
    const runners = (await ask({ url: stack.url }, "GET", "/engines/ps")).json();
    expect(runners).toEqual(expect.arrayContaining([expect.objectContaining({ model_name: "ai/reranker:latest", mode: "reranking" })]));
    expect(await stack.runnerLogs()).toContain("--rerank");
  });

  it.each([
    ["no query", { model: "ai/reranker", documents: ["a"] }, 400, "invalid_request"],
    ["no documents", { model: "ai/reranker", query: "q" }, 400, "invalid_request"],
    ["empty documents", { model: "ai/reranker", query: "q", documents: [] }, 400, "invalid_request"],
    ["a document that is not a string", { model: "ai/reranker", query: "q", documents: [{ text: 1 }] }, 400, "invalid_request"],
    ["top_n of zero", { model: "ai/reranker", query: "q", documents: ["a"], top_n: 0 }, 400, "invalid_request"],
    ["a model it does not have", { model: "ai/absent", query: "q", documents: ["a"] }, 404, "model_not_found"],
  ])("refuses %s in the OpenAI envelope", async (_, body, status, code) => {
    const answer = await ask({ url: stack.url }, "POST", "/rerank", body);
    expect([answer.status, answer.json().error.code]).toEqual([status, code]);
    expect(answer.json().error.message).toBeTypeOf("string");
  });
});

describe("score (vLLM's shape)", () => {
  it("scores each of text_2 against text_1, in the documents' order, as rerank does", async () => {
    const ranked = (await ask({ url: stack.url }, "POST", "/rerank", { model: "ai/reranker", query: "cat", documents: DOCUMENTS })).json().results;
    const answer = await ask({ url: stack.url }, "POST", "/score", { model: "ai/reranker", text_1: "cat", text_2: DOCUMENTS });
    expect(answer.status).toBe(200);
    const body = answer.json();
    expect(body).toMatchObject({ object: "list", model: "ai/reranker" });
    expect(body.data.map((d: { index: number }) => d.index)).toEqual([0, 1, 2, 3]);
    for (const { index, relevance_score } of ranked) expect(body.data[index]).toEqual({ index, object: "score", score: relevance_score });
  });

  it("takes one document as a string, and answers at the engine paths", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/engines/llama.cpp/v1/score", { model: "ai/reranker", text_1: ["cat"], text_2: "a cat" });
    expect(answer.json().data).toEqual([expect.objectContaining({ index: 0, object: "score" })]);
  });

  it.each([
    ["many queries", { model: "ai/reranker", text_1: ["a", "b"], text_2: ["c", "d"] }, 400],
    ["no text_2", { model: "ai/reranker", text_1: "a" }, 400],
    ["a model it does not have", { model: "ai/absent", text_1: "a", text_2: "b" }, 404],
  ])("refuses %s", async (_, body, status) => {
    const answer = await ask({ url: stack.url }, "POST", "/score", body);
    expect(answer.status).toBe(status);
    expect(answer.json().error.type).toBeTypeOf("string");
  });
});

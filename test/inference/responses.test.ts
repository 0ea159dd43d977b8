import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CODEX_SECOND_TURN } from "../support/codex-items.ts";
import { ask } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// OpenAI's Responses API with the official client, the server under Bun, real runners:
// llama-server serves /v1/responses but refuses previous_response_id, so we keep recent responses
// and send a continued conversation on whole.

let stack: Stack;
beforeAll(async () => {
  // ai/tiny is trained on 512 tokens, fewer than Codex's items; ai/roomy on 4096.
  stack = await startStack({ models: ["ai/tiny"], shaped: { "ai/roomy": { context: 4096 } } });
});
afterAll(async () => {
  await stack?.stop();
});

const client = (base: string) => new OpenAI({ baseURL: `${stack.url}${base}`, apiKey: "unused", maxRetries: 0 });
const extra = NO_EARLY_STOP as unknown as Record<string, never>;

describe.each(["/v1", "/engines/llama.cpp/v1"])("responses at %s", (base) => {
  it("creates a response, and a second turn continues it with previous_response_id", async () => {
    // Greedy, so that the answer is the same every run (a sampled one may be pieces of characters only).
    const first = await client(base).responses.create({ model: "ai/tiny", input: "hello there", max_output_tokens: 4, temperature: 0, ...extra });
    expect(first.object).toBe("response");
    expect(first.status).toBe("completed");
    expect(first.usage!.output_tokens).toBe(4);
    expect(first.output_text.length).toBeGreaterThan(0);
    const second = await client(base).responses.create({ model: "ai/tiny", input: "and then?", previous_response_id: first.id, max_output_tokens: 4, ...extra });
    expect(second.status).toBe("completed");
    // The second turn's prompt holds the first turn: its input counts more tokens.
    expect(second.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens);
  });

  it("streams a response, and a streamed one can be continued", async () => {
    const stream = await client(base).responses.create({ model: "ai/tiny", input: "hello", max_output_tokens: 4, stream: true, ...extra });
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) if (event.type === "response.completed") completed = event.response;
    expect(completed?.status).toBe("completed");
    const next = await client(base).responses.create({ model: "ai/tiny", input: "more", previous_response_id: completed!.id, max_output_tokens: 2 });
    expect(next.usage!.input_tokens).toBeGreaterThan(completed!.usage!.input_tokens);
  });

  it("retrieves and deletes a kept response", async () => {
    const made = await client(base).responses.create({ model: "ai/tiny", input: "keep me", max_output_tokens: 2 });
    expect((await client(base).responses.retrieve(made.id)).id).toBe(made.id);
    await client(base).responses.delete(made.id);
    const gone = await client(base).responses.retrieve(made.id).catch((e: unknown) => e);
    expect((gone as InstanceType<typeof OpenAI.APIError>).status).toBe(404);
  });
});

describe("responses, Codex's items", () => {
  // Codex's second request, as it sends it (stream, store false, its items): llama-server alone
  // refuses the reasoning item without text with "Cannot determine type of 'item'".
  it("answers Codex's second turn, streamed and not", async () => {
    const input = CODEX_SECOND_TURN as unknown as OpenAI.Responses.ResponseInput;
    const whole = await client("/v1").responses.create({ model: "ai/roomy", input, store: false, max_output_tokens: 2, ...extra });
    expect(whole.status).toBe("completed");
    const stream = await client("/v1").responses.create({ model: "ai/roomy", input, store: false, stream: true, max_output_tokens: 2, ...extra });
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) if (event.type === "response.completed") completed = event.response;
    expect(completed?.status).toBe("completed");
  });

  it("answers an apply_patch call and its output (custom tool items) continued from a kept response", async () => {
    const first = await client("/v1").responses.create({ model: "ai/tiny", input: "patch it", max_output_tokens: 2, ...extra });
    const input = [
      { type: "custom_tool_call", call_id: "call_1", name: "apply_patch", input: "*** Begin Patch\n*** End Patch" },
      { type: "custom_tool_call_output", call_id: "call_1", output: "Done!" },
    ] as unknown as OpenAI.Responses.ResponseInput;
    const next = await client("/v1").responses.create({ model: "ai/tiny", input, previous_response_id: first.id, max_output_tokens: 2, ...extra });
    expect(next.status).toBe("completed");
  });
});

describe("responses, refused", () => {
  it.each([
    ["an unknown previous_response_id", { model: "ai/tiny", input: "x", previous_response_id: "resp_nope" }, 404, "response_not_found"],
    ["no input", { model: "ai/tiny" }, 400, "invalid_request"],
    ["a model it does not have", { model: "ai/absent", input: "x" }, 404, "model_not_found"],
    ["a body that is not an object", [1, 2], 400, "invalid_request"],
  ])("%s", async (_, body, status, code) => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/responses", body);
    expect([answer.status, answer.json().error.code]).toEqual([status, code]);
  });

  it("an item llama-server cannot take, rewritten by none, is refused by its index and type", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/responses", { model: "ai/tiny", input: [{ role: "user", content: "x" }, { type: "web_search_call", id: "ws_1" }] });
    expect([answer.status, answer.json().error.code]).toEqual([400, "unsupported_input_item"]);
    expect(answer.json().error.message).toContain("input[1] (web_search_call)");
  });

  it("store: false keeps nothing", async () => {
    const made = (await ask({ url: stack.url }, "POST", "/v1/responses", { model: "ai/tiny", input: "x", max_output_tokens: 1, store: false })).json();
    expect((await ask({ url: stack.url }, "GET", `/v1/responses/${made.id}`)).status).toBe(404);
  });
});

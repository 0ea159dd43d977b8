import { describe, expect, it } from "vitest";
import { counted, countedAnswer, countedStream, prefillBody, processedBy, processedIn } from "../../src/inference/prefill.ts";

// A leader's prefill (src/inference/prefill.ts): the body that asks for its prompt alone, and its
// own answer's counts with what the prefill processed moved back from "cached" to "processed".

const bytes = (value: unknown) => new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value));
const text = (b: Uint8Array) => new TextDecoder().decode(b);

describe("a leader's prefill", () => {
  it("asks for the prompt alone: nothing generated, no stream", () => {
    const body = prefillBody(bytes({ model: "m", messages: [], stream: true, stream_options: { include_usage: true }, timings_per_token: true, max_tokens: 30 }));
    expect(JSON.parse(text(body))).toEqual({ model: "m", messages: [], max_tokens: 30, n_predict: 0 });
  });

  it("reads what it processed from its answer's timings", () => {
    expect(processedBy(bytes({ timings: { prompt_n: 4021, cache_n: 0 } }))).toBe(4021);
    // llama-server's Responses API answers without timings: its usage says it.
    expect(processedBy(bytes({ object: "response", usage: { input_tokens: 4021, input_tokens_details: { cached_tokens: 1 }, output_tokens: 0 } }))).toBe(4020);
    expect(processedBy(bytes({ usage: { prompt_tokens: 30, prompt_tokens_details: { cached_tokens: 10 } } }))).toBe(20);
    expect(processedBy(bytes("not json"))).toBe(0);
  });

  it("reads a prefill's answer up to a bound: an error, or an answer past it, counts nothing", async () => {
    expect(await processedIn(new Response(JSON.stringify({ timings: { prompt_n: 4021 } })))).toBe(4021);
    expect(await processedIn(new Response(JSON.stringify({ timings: { prompt_n: 4021 } }), { status: 500 }))).toBe(0);
    expect(await processedIn(new Response(JSON.stringify({ timings: { prompt_n: 4021 }, pad: "x".repeat(2 << 20) })))).toBe(0);
  });

  it("moves those tokens from cached to processed in each dialect's counts, and in nothing else", () => {
    const chat = { choices: [{ message: { content: '"cache_n":4020' } }], usage: { prompt_tokens: 4030, prompt_tokens_details: { cached_tokens: 4020 } }, timings: { prompt_n: 10, cache_n: 4020 } };
    expect(counted(chat, 4021)).toEqual({ ...chat, usage: { prompt_tokens: 4030, prompt_tokens_details: { cached_tokens: 0 } }, timings: { prompt_n: 4030, cache_n: 0 } });
    const responses = { type: "response.completed", response: { id: "r", usage: { input_tokens: 4030, input_tokens_details: { cached_tokens: 4020 } } } };
    expect(counted(responses, 4000)).toEqual({ type: "response.completed", response: { id: "r", usage: { input_tokens: 4030, input_tokens_details: { cached_tokens: 20 } } } });
    expect(counted({ choices: [] }, 5)).toEqual({ choices: [] });
  });

  it("a whole answer and a stream alike; events without counts pass as they came", async () => {
    expect(JSON.parse(text(countedAnswer(bytes({ timings: { prompt_n: 1, cache_n: 100 } }), 100)))).toEqual({ timings: { prompt_n: 101, cache_n: 0 } });
    const events = ['data: {"choices":[{"delta":{"content":"hi"}}]}', 'data: {"choices":[],"timings":{"prompt_n":1,"cache_n":50}}', "data: [DONE]"];
    const source = new Blob(events.map((e) => `${e}\n\n`)).stream();
    const out = await new Response(source.pipeThrough(countedStream(50))).text();
    expect(out).toBe('data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: {"choices":[],"timings":{"prompt_n":51,"cache_n":0}}\n\ndata: [DONE]\n\n');
  });
});

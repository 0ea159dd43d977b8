import { describe, expect, it } from "vitest";
import { completeUsage, promptUsage, withFullUsage } from "../../src/dialects/anthropic-usage.ts";
import type { RunnerQuestions } from "../../src/inference/forward.ts";

// Anthropic's usage made whole from llama-server's (v0.5.0) stream, event by event: the pure
// transform, with a scripted stream. The same against real runners and the official client is in
// test/inference/usage-dialects.test.ts.

describe("an Anthropic stream's usage", () => {
  const run = async (chunks: string[], promptSize?: number) => {
    const source = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
        controller.close();
      },
    });
    let asked = 0;
    const countPrompt = async () => (asked++, promptSize === undefined ? undefined : { input_tokens: promptSize - 2, cache_read_input_tokens: 2, cache_creation_input_tokens: 0 });
    return { text: await new Response(source.pipeThrough(completeUsage("ai/tiny", countPrompt))).text(), asked };
  };
  const delta = 'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":3}}\n\n';

  it("puts one before a stream that lacks it, even when its first event comes in pieces, with the prompt as counted", async () => {
    const { text, asked } = await run(["event: content_block_st", 'art\ndata: {"type":"content_block_start"}\n\n', delta, "event: message_stop\ndata: {}\n\n"], 42);
    expect(asked).toBe(1);
    expect(text).toMatch(/^event: message_start\ndata: \{"type":"message_start","message":\{"id":"msg_\w+","type":"message","role":"assistant","content":\[\],"model":"ai\/tiny"/);
    const usage = '{"input_tokens":40,"cache_read_input_tokens":2,"cache_creation_input_tokens":0';
    expect(text).toContain(`"usage":${usage},"output_tokens":0}}}\n\n`);
    expect(text).toContain('event: content_block_start\ndata: {"type":"content_block_start"}\n\n');
    expect(text).toContain(`"usage":${usage},"output_tokens":3}}\n\nevent: message_stop\ndata: {}\n\n`);
  });

  it("keeps a stream's own message_start, its counts in Anthropic's full shape, and repeats them in message_delta", async () => {
    const start = 'event: message_start\ndata: {"type":"message_start","message":{"id":"chatcmpl-1","usage":{"cache_read_input_tokens":7,"input_tokens":2,"output_tokens":0}}}\n\n';
    const { text, asked } = await run([start, ": ping\n\n", delta, "event: message_stop\ndata: {}\n\n"], 999);
    expect(asked).toBe(0);
    const usage = '{"input_tokens":2,"cache_read_input_tokens":7,"cache_creation_input_tokens":0';
    expect(text).toBe(
      `event: message_start\ndata: {"type":"message_start","message":{"id":"chatcmpl-1","usage":${usage},"output_tokens":0}}}\n\n: ping\n\n` +
        `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":${usage},"output_tokens":3}}\n\nevent: message_stop\ndata: {}\n\n`,
    );
  });

  it("a stream that is only its end (every token generated ended mid-character) gets both", async () => {
    const { text, asked } = await run([delta, "event: message_stop\ndata: {}\n\n"], 42);
    expect(asked).toBe(1);
    const usage = '{"input_tokens":40,"cache_read_input_tokens":2,"cache_creation_input_tokens":0';
    expect(text).toMatch(new RegExp(`^event: message_start\n.*"usage":${usage.replaceAll("{", "\\{")},"output_tokens":0\}\}\}\n\n`));
    expect(text).toContain(`"usage":${usage},"output_tokens":3}}\n\nevent: message_stop`);
  });

  it("a prompt the runner could not count is said as 0, not left out", async () => {
    const { text } = await run(['event: content_block_start\ndata: {"type":"content_block_start"}\n\n', delta]);
    expect(text).toContain('"usage":{"input_tokens":0,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":3}');
  });

  it("an error first goes on alone: it is no message", async () => {
    const error = 'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"x"}}\n\n';
    expect(await run([error], 5)).toEqual({ text: error, asked: 0 });
  });
});

describe("a prompt's usage asked of the runner", () => {
  const slot = (cache: number, processed: number, at_work = true) => ({ id: 0, is_processing: at_work, n_prompt_tokens: cache + processed + 9, n_prompt_tokens_cache: cache, n_prompt_tokens_processed: processed });
  /** A runner that answers count_tokens and /slots so (a scripted stand-in: the real one is in test/inference/usage-dialects.test.ts). */
  const runner = (size: number | undefined, slots: object[]): RunnerQuestions => ({
    post: async (path) => (expect(path).toBe("/v1/messages/count_tokens"), size === undefined ? Response.json({ error: {} }, { status: 500 }) : Response.json({ input_tokens: size })),
    get: async (path) => (expect(path).toBe("/slots"), Response.json(slots)),
  });
  const usage = (input: number, cached: number) => ({ input_tokens: input, cache_read_input_tokens: cached, cache_creation_input_tokens: 0 });

  it.each([
    ["the one slot at work on a prompt of that size", 100, [slot(90, 10), slot(5, 20), slot(0, 100, false)], usage(10, 90)],
    ["several at work on that size, with one cached part", 100, [slot(90, 10), slot(90, 10)], usage(10, 90)],
    ["several at work on that size, with different cached parts: unknown, all input", 100, [slot(90, 10), slot(50, 50)], usage(100, 0)],
    ["none at work on that size (the generation ended): all input", 100, [slot(0, 100, false), slot(5, 20)], usage(100, 0)],
    ["no slots to say: all input", 100, [], usage(100, 0)],
    ["a prompt it could not count: nothing", undefined, [slot(90, 10)], undefined],
  ])("%s", async (_, size, slots, expected) => {
    expect(await promptUsage(runner(size, slots))).toEqual(expected);
  });

  it("prompt caches kept per key: the slots (maybe another key's) are not asked, all of the prompt is input", async () => {
    const asked: string[] = [];
    const questions: RunnerQuestions = { post: async () => Response.json({ input_tokens: 100 }), get: async (path) => (asked.push(path), Response.json([slot(90, 10)])) };
    expect(await promptUsage(questions, { split: false })).toEqual(usage(100, 0));
    expect(asked).toEqual([]);
  });

  it("a runner that fails to answer: nothing, and no error", async () => {
    const failing: RunnerQuestions = { post: () => Promise.reject(new Error("gone")), get: () => Promise.reject(new Error("gone")) };
    expect(await promptUsage(failing)).toBeUndefined();
  });
});

describe("a whole message's usage", () => {
  it("says its cache writes (none) beside llama-server's counts", () => {
    const message = { id: "chatcmpl-1", usage: { cache_read_input_tokens: 5, input_tokens: 1, output_tokens: 2 } };
    expect(withFullUsage(message)).toEqual({ id: "chatcmpl-1", usage: { input_tokens: 1, cache_read_input_tokens: 5, cache_creation_input_tokens: 0, output_tokens: 2 } });
  });
});

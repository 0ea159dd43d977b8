import { describe, expect, it } from "vitest";
import { completeUsage, withFullUsage } from "../../src/dialects/anthropic-usage.ts";

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
    const countPrompt = async () => (asked++, promptSize);
    return { text: await new Response(source.pipeThrough(completeUsage("ai/tiny", countPrompt))).text(), asked };
  };
  const delta = 'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":3}}\n\n';

  it("puts one before a stream that lacks it, even when its first event comes in pieces, with the prompt as counted", async () => {
    const { text, asked } = await run(["event: content_block_st", 'art\ndata: {"type":"content_block_start"}\n\n', delta, "event: message_stop\ndata: {}\n\n"], 42);
    expect(asked).toBe(1);
    expect(text).toMatch(/^event: message_start\ndata: \{"type":"message_start","message":\{"id":"msg_\w+","type":"message","role":"assistant","content":\[\],"model":"ai\/tiny"/);
    const usage = '{"input_tokens":42,"cache_read_input_tokens":0,"cache_creation_input_tokens":0';
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

  it("an error first goes on alone: it is no message", async () => {
    const error = 'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"x"}}\n\n';
    expect(await run([error], 5)).toEqual({ text: error, asked: 0 });
  });
});

describe("a whole message's usage", () => {
  it("says its cache writes (none) beside llama-server's counts", () => {
    const message = { id: "chatcmpl-1", usage: { cache_read_input_tokens: 5, input_tokens: 1, output_tokens: 2 } };
    expect(withFullUsage(message)).toEqual({ id: "chatcmpl-1", usage: { input_tokens: 1, cache_read_input_tokens: 5, cache_creation_input_tokens: 0, output_tokens: 2 } });
  });
});

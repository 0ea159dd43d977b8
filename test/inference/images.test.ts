import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { solidPng, pngDataUrl, type Rgb } from "../support/tiny-png.ts";
import { IMAGE_TOKENS, tinyProjectorGguf } from "../support/tiny-projector.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// Images end to end: a chat model pulled with a working multimodal projector (test/support/
// tiny-projector.ts), real PNGs sent inline through the official OpenAI client, llama-server's
// vision path turning them into prompt tokens. The weights are random: what is asserted is what
// holds whatever they are (the image's tokens are counted, a different image changes the answer's
// odds), never what the model says. The same chat model without a projector refuses images, with a
// 400 of ours in each dialect's envelope.

// Terse (chat-vocab.ts): it never opens a tool call, whose parse could fail on random weights.
const TEXT_MODEL = { vocabulary: "bpe", answers: "terse", seed: 1 } as const;

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    models: [],
    withProjector: { "ai/seeing": { projector: tinyProjectorGguf(), model: TEXT_MODEL } },
    shaped: { "ai/blind": TEXT_MODEL },
  });
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

const client = () => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
const QUESTION = "What colour is this?";
const withImage = (rgb: Rgb, size = 32) => [
  { type: "text" as const, text: QUESTION },
  { type: "image_url" as const, image_url: { url: pngDataUrl(solidPng(size, size, rgb)) } },
];

type Odds = { token: string; logprob: number }[];

/** The first answer token's five likeliest tokens and their log-probabilities, greedy. */
async function odds(rgb: Rgb): Promise<Odds> {
  const completion = await client().chat.completions.create({
    model: "ai/seeing",
    messages: [{ role: "user", content: withImage(rgb) }],
    max_tokens: 1,
    temperature: 0,
    logprobs: true,
    top_logprobs: 5,
  });
  return completion.choices[0]!.logprobs!.content![0]!.top_logprobs.map(({ token, logprob }) => ({ token, logprob }));
}

/** How far apart two answers' odds are: the most a log-probability moved, or infinitely far when the likeliest tokens differ. */
const apart = (a: Odds, b: Odds) =>
  a.some((o, i) => o.token !== b[i]?.token) ? Number.POSITIVE_INFINITY : Math.max(...a.map((o, i) => Math.abs(o.logprob - b[i]!.logprob)));

describe("a chat model with a projector", () => {
  it("answers a chat with an image, the image's tokens counted among the prompt's", async () => {
    const seen = await client().chat.completions.create({ model: "ai/seeing", messages: [{ role: "user", content: withImage([255, 0, 0], 48) }], max_tokens: 4, ...NO_EARLY_STOP });
    expect(seen.choices[0]!.finish_reason).toBe("length");
    expect(seen.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(seen.usage!.completion_tokens).toBe(4);
    const unseen = await client().chat.completions.create({ model: "ai/seeing", messages: [{ role: "user", content: QUESTION }], max_tokens: 4, ...NO_EARLY_STOP });
    // The projector resizes any image to its own size and gives one token per patch: the image
    // stands where llama-server put its marker, and no other token changes.
    expect(seen.usage!.prompt_tokens - unseen.usage!.prompt_tokens).toBe(IMAGE_TOKENS);
  });

  it("answers another image with other odds, the same image with the same", async () => {
    const red = await odds([255, 0, 0]);
    const blue = await odds([0, 0, 255]);
    const redAgain = await odds([255, 0, 0]);
    // The same prompt may be evaluated in other batches (its start cached), which may move the
    // last digits; another image moves the odds themselves.
    expect(apart(red, redAgain)).toBeLessThan(1e-3);
    expect(apart(red, blue)).toBeGreaterThan(1e-2);
  });

  it("reads Ollama's images too (bare base64, made chat parts)", async () => {
    const chat = async (images?: string[]) => {
      const answer = await ask({ url: stack.url }, "POST", "/api/chat", { model: "ai/seeing", stream: false, options: { num_predict: 2 }, messages: [{ role: "user", content: QUESTION, ...(images ? { images } : {}) }] });
      expect(answer.status).toBe(200);
      return answer.json().prompt_eval_count as number;
    };
    const image = Buffer.from(solidPng(32, 32, [0, 255, 0])).toString("base64");
    expect((await chat([image])) - (await chat())).toBe(IMAGE_TOKENS);
  });
});

describe("a chat model without a projector", () => {
  const red = pngDataUrl(solidPng(32, 32, [255, 0, 0]));
  const base64 = red.slice(red.indexOf(",") + 1);
  // llama-server itself answers 500 (server_error) "image input is not supported - hint: ... mmproj".
  it.each<[string, string, object, (body: any) => unknown]>([
    ["OpenAI chat", "/v1/chat/completions", { model: "ai/blind", max_tokens: 4, messages: [{ role: "user", content: withImage([255, 0, 0]) }] }, (body) => body.error],
    ["Anthropic messages", "/v1/messages", { model: "ai/blind", max_tokens: 4, messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: red } }] }] }, (body) => body.error],
    ["Ollama chat", "/api/chat", { model: "ai/blind", stream: false, messages: [{ role: "user", content: QUESTION, images: [base64] }] }, (body) => ({ message: body.error })],
  ])("%s: an image is refused with a 400 that says why", async (_, path, body, error) => {
    const answer = await ask({ url: stack.url }, "POST", path, body);
    expect(answer.status).toBe(400);
    expect(error(answer.json())).toMatchObject({ message: "model ai/blind:latest reads no images: it was pulled without a multimodal projector" });
  });

  it("in OpenAI's shape, and it still chats", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/blind", max_tokens: 4, messages: [{ role: "user", content: withImage([255, 0, 0]) }] });
    expect(answer.json()).toEqual({ error: { message: expect.any(String), type: "invalid_request_error", code: "images_not_supported" } });
    const text = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/blind", max_tokens: 4, messages: [{ role: "user", content: QUESTION }] });
    expect(text.status).toBe(200);
  });
});

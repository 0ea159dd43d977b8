import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { CHAT_MODEL } from "../support/chat-model.ts";
import { pngDataUrl, solidPng, type Rgb } from "../support/tiny-png.ts";
import { IMAGE_TOKENS, tinyProjectorGguf } from "../support/tiny-projector.ts";
import { startStack, type Stack } from "../inference/harness.ts";

// Decisions about images: the tiny BPE chat model pulled with a working multimodal projector
// (test/support/tiny-projector.ts), real PNGs through the official openai client's
// decisions.create, llama-server's vision path. The weights are random: asserted is what holds
// whatever they are (the image's tokens are counted, another image moves the odds and the same
// one does not, the figures of an answer), never what the model says.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: [], withProjector: { "ai/seeing": { projector: tinyProjectorGguf(), model: CHAT_MODEL } } });
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

const MODEL = "ai/seeing";
const client = () => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: "unused", maxRetries: 0 });
const image = (rgb: Rgb) => ({ type: "input_image" as const, image_url: pngDataUrl(solidPng(32, 32, rgb)) });
const RED: Rgb = [255, 0, 0];
const BLUE: Rgb = [0, 0, 255];
const sum = (ps: number[]) => ps.reduce((a, b) => a + b, 0);
const argmax = (ps: number[]) => ps.indexOf(Math.max(...ps));

const TEAM = { type: "choice" as const, name: "colour", instructions: "Which colour is the picture?", choices: [{ value: "red" }, { value: "green" }, { value: "blue" }, { value: "grey" }] };

/** The one choice question's probabilities, asked about `content` (an image and text). */
async function colourOdds(content: OpenAI.DecisionCreateParams["input"]) {
  const decision = await client().decisions.create({ model: MODEL, input: content, questions: [TEAM] });
  const [answer] = decision.answers as OpenAI.Decision.AnswerResourceChoice[];
  const ps = answer!.probabilities.map((p) => p.probability);
  expect(Math.abs(sum(ps) - 1)).toBeLessThan(1e-6);
  expect(answer!.choice).toBe(TEAM.choices[argmax(ps)]!.value);
  return { ps, usage: decision.usage };
}

const apart = (a: number[], b: number[]) => Math.max(...a.map((p, i) => Math.abs(p - b[i]!)));

describe("decisions about an image, with a projector", () => {
  it("answers, the image's tokens counted; another image moves the odds, the same one does not", async () => {
    const asked = (rgb?: Rgb) => [{ role: "user" as const, content: [{ type: "input_text" as const, text: "A picture from the shop." }, ...(rgb ? [image(rgb)] : [])] }];
    const red = await colourOdds(asked(RED));
    const blue = await colourOdds(asked(BLUE));
    const redAgain = await colourOdds(asked(RED));
    const text = await colourOdds(asked());
    // The image stands where its mark is, one token a patch; its part is joined to the text by a
    // blank line (a token or two) that the text alone does not have.
    const extra = red.usage.input_tokens - text.usage.input_tokens;
    expect(extra).toBeGreaterThanOrEqual(IMAGE_TOKENS);
    expect(extra).toBeLessThanOrEqual(IMAGE_TOKENS + 4);
    expect(apart(red.ps, redAgain.ps)).toBeLessThan(1e-3);
    expect(apart(red.ps, blue.ps)).toBeGreaterThan(apart(red.ps, redAgain.ps));
    expect(apart(red.ps, blue.ps)).toBeGreaterThan(1e-3);
  });

  it("processes the image once for all of a request's questions, in the runner's slots", async () => {
    const input = [{ role: "user" as const, content: [image([0, 128, 0]), { type: "input_text" as const, text: `Ticket ${crypto.randomUUID()}: is this the broken part?` }] }];
    const questions = Array.from({ length: 8 }, (_, i) => ({ type: "predicate" as const, name: `q${i}`, instructions: `Fact ${i} holds.` }));
    const { data, response } = await client().decisions.create({ model: MODEL, input, questions }).withResponse();
    expect(data.answers.map((a) => [a.type, a.name])).toEqual(questions.map((q) => ["predicate", q.name]));
    expect(Number(response.headers.get("x-llamadock-decision-slots"))).toBeGreaterThanOrEqual(1);
    // Each question's prompt holds the image; had each processed it again, every question would
    // process at least the image's tokens.
    const processed = data.usage.input_tokens - data.usage.input_tokens_details.cached_tokens;
    expect(data.usage.input_tokens).toBeGreaterThan(8 * IMAGE_TOKENS);
    expect(processed).toBeLessThan(data.usage.input_tokens / 2);
  });

  it("takes an image in a question's instructions, and reads 30 choices a token at a time with one", async () => {
    const choices = Array.from({ length: 30 }, (_, i) => ({ value: `shade-${i}` }));
    /** The two questions, each with its own image (or none). */
    const sorted = (red?: Rgb, shade?: Rgb) =>
      client().decisions.create({
        model: MODEL,
        input: "Sort the shop's pictures.",
        questions: [
          { type: "predicate", name: "red", instructions: [{ type: "input_text", text: "This picture is red:" }, ...(red ? [image(red)] : [])] },
          { type: "choice", name: "shade", instructions: [...(shade ? [image(shade)] : []), { type: "input_text", text: "Which shade?" }], choices },
        ],
      });
    const decision = await sorted(RED, BLUE);
    const [red, shade] = decision.answers as [OpenAI.Decision.AnswerResourcePredicate, OpenAI.Decision.AnswerResourceChoice];
    expect(red.probability).toBeGreaterThanOrEqual(0);
    expect(red.probability).toBeLessThanOrEqual(1);
    const ps = shade.probabilities.map((p) => p.probability);
    expect(shade.probabilities.map((p) => p.value)).toEqual(choices.map((c) => c.value));
    expect(Math.abs(sum(ps) - 1)).toBeLessThan(1e-6);
    expect(shade.choice).toBe(choices[argmax(ps)]!.value);
    expect(decision.usage.output_tokens).toBeGreaterThan(2);
    // Each question's image is in its prompt: the same questions without them take each image's
    // tokens fewer (at least), and another image in the first question moves its answer, the
    // same one does not.
    const without = await sorted();
    expect(decision.usage.input_tokens - without.usage.input_tokens).toBeGreaterThanOrEqual(2 * IMAGE_TOKENS);
    const redOf = async (rgb: Rgb) => ((await sorted(rgb, BLUE)).answers[0] as OpenAI.Decision.AnswerResourcePredicate).probability;
    const [again, blue] = [await redOf(RED), await redOf(BLUE)];
    expect(Math.abs(red.probability - again)).toBeLessThan(1e-3);
    expect(Math.abs(red.probability - blue)).toBeGreaterThan(Math.abs(red.probability - again));
    expect(Math.abs(red.probability - blue)).toBeGreaterThan(1e-3);
  });
});

describe("images refused, in OpenAI's shape", () => {
  const decision = (content: unknown[], question: object = { type: "predicate", instructions: "It is red." }) => ({ model: MODEL, input: [{ role: "user", content }], questions: [question] });
  it.each<[string, object, string, RegExp]>([
    ["an image by URL while remote media are off", decision([{ type: "input_image", image_url: "https://example.com/cat.png" }]), "media_not_allowed", /remote media are off/],
    ["an image URL of another scheme", decision([{ type: "input_image", image_url: "file:///etc/passwd" }]), "media_not_allowed", /never fetched/],
    ["a data: URL that is not base64", decision([{ type: "input_image", image_url: "data:image/png,rawbytes" }]), "invalid_image", /base64 data: URL/],
    ["bytes that are no image", decision([{ type: "input_image", image_url: `data:image/png;base64,${Buffer.from("not a picture").toString("base64")}` }]), "invalid_request", /refused the question's prompt/],
    ["a text that holds the image mark", decision([image(RED), { type: "input_text", text: "see <__media__> here" }]), "invalid_request", /marks where an image goes/],
  ])("%s", async (_, body, code, message) => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/decisions", body);
    expect(answer.status).toBe(400);
    expect(answer.json()).toEqual({ error: { message: expect.stringMatching(message), type: expect.any(String), code } });
  });

  it("the server answers after them", async () => {
    const { ps } = await colourOdds([{ role: "user", content: [image(RED)] }]);
    expect(ps).toHaveLength(4);
  });
});

import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask, type Target } from "../support/http.ts";
import { until } from "../support/until.ts";
import { CHAT_MODEL } from "../support/chat-model.ts";
import { startStack, type Stack } from "../inference/harness.ts";
import type { RuntimeName } from "../support/server-process.ts";
import { questionMessages, type Question } from "../../src/decisions/core.ts";

// Decisions end to end: the official openai client's decisions.create and System One's shape by
// plain requests, under every base path and over the Unix socket, answered by the tiny BPE chat
// model's real llama-server. Its weights are random: the answers are asserted by what they must
// be whatever the weights (probabilities that sum to 1, the answer their argmax, the score their
// expectation, the confidence as defined, the order, the usage), never by what they say.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: [], embedders: ["ai/embedder"], shaped: { "ai/chat": CHAT_MODEL, "ai/nocache": { ...CHAT_MODEL, seed: 2 }, "ai/decider": DECIDER } });
});
afterAll(async () => {
  await stack?.stop();
});

const MODEL = "ai/chat";
/** A "decision model" by its GGUF: our llama-server has no decision route for it (engine.test.ts has one that does). */
const DECIDER = { ...CHAT_MODEL, seed: 3, strings: { "decision.type": "systemone" } };
const P = "/exp/vDD4.40";
const tcp = (): Target => ({ url: stack.url });
const unix = (): Target => ({ socketPath: stack.socket });
const client = (base: string) => new OpenAI({ baseURL: `${stack.url}${base}`, apiKey: "unused", maxRetries: 0 });

const sum = (ps: number[]) => ps.reduce((a, b) => a + b, 0);
/** The definition docs/api.md gives: 1 minus the entropy over that of equal odds. */
const expectedConfidence = (ps: number[]) => 1 - ps.reduce((h, p) => (p > 0 ? h - p * Math.log(p) : h), 0) / Math.log(ps.length);
const argmax = (ps: number[]) => ps.indexOf(Math.max(...ps));

const QUESTIONS: OpenAI.DecisionCreateParams["questions"] = [
  { type: "predicate", name: "outage", instructions: "The checkout is down." },
  {
    type: "choice",
    name: "team",
    instructions: [{ type: "input_text", text: "Which team should handle this ticket?" }],
    choices: [{ value: "billing", description: "Payments and refunds" }, { value: "technical", description: "Software errors" }, { value: true }, { value: "true" }],
  },
  { type: "score", instructions: "How urgent is it?", levels: [{ label: "low" }, { label: "medium", description: "within a day" }, { label: "high" }] },
];

/** Every property an answer to QUESTIONS must have, whatever the model says. */
function checkDecision(decision: OpenAI.Decision, asked = 3) {
  expect(decision.model).toBe(MODEL);
  expect(decision.answers.map((a) => [a.type, a.name])).toEqual([
    ["predicate", "outage"],
    ["choice", "team"],
    ["score", null],
  ]);
  const [predicate, choice, score] = decision.answers as [OpenAI.Decision.AnswerResourcePredicate, OpenAI.Decision.AnswerResourceChoice, OpenAI.Decision.AnswerResourceScore];
  expect(predicate.probability).toBeGreaterThanOrEqual(0);
  expect(predicate.probability).toBeLessThanOrEqual(1);

  const cps = choice.probabilities.map((p) => p.probability);
  expect(choice.probabilities.map((p) => p.value)).toEqual(["billing", "technical", true, "true"]);
  expect(Math.abs(sum(cps) - 1)).toBeLessThan(1e-6);
  expect(choice.choice).toBe(choice.probabilities[argmax(cps)]!.value);
  expect(choice.confidence).toBeCloseTo(expectedConfidence(cps), 9);

  const sps = score.probabilities.map((p) => p.probability);
  expect(score.probabilities.map((p) => [p.label, p.value])).toEqual([["low", 0], ["medium", 1], ["high", 2]]);
  expect(Math.abs(sum(sps) - 1)).toBeLessThan(1e-6);
  expect(score.score).toBeCloseTo(sum(sps.map((p, i) => p * i)), 9);
  expect(score.confidence).toBeCloseTo(expectedConfidence(sps), 9);

  const { usage } = decision;
  expect(usage.output_tokens).toBe(asked); // one label token per question
  expect(usage.input_tokens).toBeGreaterThan(0);
  expect(usage.input_tokens_details.cached_tokens).toBeLessThan(usage.input_tokens);
  expect(usage.total_tokens).toBe(usage.input_tokens + usage.output_tokens);
}

describe("OpenAI's decisions through the official client", () => {
  it.each(["/v1", "/engines/v1", "/engines/llama.cpp/v1"])("answers every question in order under %s", async (base) => {
    const { data, response } = await client(base)
      .decisions.create({ model: MODEL, input: `Ticket ${base}: our checkout has returned 500 errors since 9am.`, questions: QUESTIONS })
      .withResponse();
    expect(response.headers.get("x-llamadock-decision-method")).toBe("chat-next-token");
    checkDecision(data);
  });

  it("takes messages of every role, tool calls and their outputs, and JSON parts", async () => {
    const decision = await client("/v1").decisions.create({
      model: MODEL,
      input: [
        { role: "developer", content: "Tickets come from the shop." },
        { role: "user", content: [{ type: "input_text", text: "My order failed." }, { type: "input_json", data: { order: 42, status: 500 } }] },
        { type: "function_call", call_id: "c1", name: "lookup", arguments: '{"order":42}' },
        { type: "function_call_output", call_id: "c1", output: "payment service timed out" },
        { role: "assistant", content: [{ type: "output_text", text: "Looking into it." }] },
      ],
      questions: QUESTIONS,
    });
    checkDecision(decision);
  });

  it("answers the same over the Unix socket with the /exp/vDD4.40 prefix, under every base path", async () => {
    for (const base of ["/v1", "/engines/v1", "/engines/llama.cpp/v1"]) {
      const answer = await ask(unix(), "POST", `${P}${base}/decisions`, { model: MODEL, input: `Socket ${base}: the checkout is slow.`, questions: QUESTIONS });
      expect(answer.status).toBe(200);
      checkDecision(answer.json());
    }
  });

  it("reads the input once: its questions share it in the runner's slots, from its prompt cache", async () => {
    // A long input of its own (one character is about one token) and twelve short questions: had
    // each question processed the input, the request would process twelve inputs.
    const input = `Report ${crypto.randomUUID()}: ${"The checkout failed with errors since nine, then recovered. ".repeat(9)}`;
    const questions = Array.from({ length: 12 }, (_, i) => ({ type: "predicate" as const, instructions: `Item ${i} holds.` }));
    const one = await client("/v1").decisions.create({ model: MODEL, input: `Other ${input}`, questions: questions.slice(0, 1) });
    const inputTokens = one.usage.input_tokens - one.usage.input_tokens_details.cached_tokens; // the input and one question, nothing cached
    expect(inputTokens).toBeGreaterThan(400);
    const { data: many, response } = await client("/v1").decisions.create({ model: MODEL, input, questions }).withResponse();
    // The questions ran in all four slots of the runner (16384 tokens over four)...
    expect(response.headers.get("x-llamadock-decision-slots")).toBe("4");
    const processed = many.usage.input_tokens - many.usage.input_tokens_details.cached_tokens;
    // ...and processed the input once (about inputTokens) and each further question's own words
    // with the input's last few tokens, which make its step a tile (see "steps in tiles" below;
    // under 100 tokens each, 84 on a run), where twelve inputs would be twelve times inputTokens.
    expect(processed).toBeLessThan(inputTokens + 11 * 100);
    expect(many.usage.input_tokens_details.cached_tokens).toBeGreaterThan(11 * (inputTokens - 80));
    expect(many.answers).toHaveLength(12);
  });
});

describe("many questions", () => {
  it("answers 400 questions in order, the input processed about once", async () => {
    const input = `Ticket ${crypto.randomUUID()}: ${"Our checkout has returned 500 errors since 9am for every card. ".repeat(4)}`;
    const inputTokens = (await ask(tcp(), "POST", "/tokenize", { model: MODEL, content: input })).json().tokens.length as number;
    const questions = Array.from({ length: 400 }, (_, i) => ({ type: "predicate" as const, name: `q${i}`, instructions: `Fact ${i}.` }));
    const { data, response } = await client("/v1").decisions.create({ model: MODEL, input, questions }).withResponse();
    expect(response.headers.get("x-llamadock-decision-slots")).toBe("4");
    expect(data.answers.map((a) => a.name)).toEqual(questions.map((q) => q.name));
    expect(data.answers.every((a) => a.type === "predicate")).toBe(true);
    expect(data.usage.output_tokens).toBe(400);
    // Every question but the first read the input from a cache; each processed its own words and
    // the input's last few tokens (about 80 here) and the input was processed once: 400 inputs
    // would be 400 times more.
    const processed = data.usage.input_tokens - data.usage.input_tokens_details.cached_tokens;
    expect(data.usage.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(399 * inputTokens);
    expect(processed).toBeLessThan(400 * 100 + 2 * inputTokens);
  }, 300_000);
});

describe("steps in tiles", () => {
  /** How many tasks llama-server has logged (every runner of the stack) whose prompt it processed `atLeast` tokens of. */
  const logged = async (atLeast: number) => [...(await stack.runnerLogs()).matchAll(/prompt eval time = +[\d.]+ ms \/ +(\d+) tokens/g)].filter((m) => Number(m[1]) >= atLeast).length;

  it("each question over the cached input processes at least 64 tokens, a tile of llama.cpp's CPU attention, and not the input again", async () => {
    // A question's step over a cached input processed only what set it apart from its slot's last
    // question: about 60 tokens for these. llama.cpp's flash attention on a CPU takes fewer than 64
    // query tokens a row at a time against every cached token (src/decisions/tiles.ts): 60 such
    // steps over 2.3k tokens took longer than 60 requests each processing its whole prompt. Counted
    // in tokens, as llama-server logs each task's, which the machine's load does not change.
    const input = `Notes ${crypto.randomUUID()}: ${"The checkout failed with errors since nine, then recovered. ".repeat(12)}`;
    const inputTokens = (await ask(tcp(), "POST", "/tokenize", { model: MODEL, content: input })).json().tokens.length as number;
    const questions = Array.from({ length: 40 }, (_, i) => ({ type: "predicate" as const, instructions: `${i}.` }));
    const before = await logged(64);
    const decision = await client("/v1").decisions.create({ model: MODEL, input, questions });
    expect(decision.answers).toHaveLength(40);
    // One step a question (labels of one token), each a tile at least: the first processed the input.
    // (llama-server writes a task's line a little after its answer.)
    await until(async () => (await logged(64)) - before >= 40, "a tile for each question").catch(() => undefined);
    expect((await logged(64)) - before).toBe(40);
    // Beyond the input, each processed its own words and a few tokens of the input's end, never the input again.
    const beyond = decision.usage.input_tokens - decision.usage.input_tokens_details.cached_tokens - inputTokens;
    expect(beyond).toBeLessThan(40 * 2 * 64);
  });
});

describe("more options than letters or digits", () => {
  /** How many single-token completions reading `labels` takes: one for each prefix (in tokens) that more than one label's tokens go on from. */
  async function stepsFor(labels: string[]): Promise<number> {
    const next = new Map<string, Set<number>>();
    for (const label of labels) {
      const tokens = (await ask(tcp(), "POST", "/tokenize", { model: MODEL, content: label })).json().tokens as number[];
      tokens.forEach((token, i) => {
        const prefix = tokens.slice(0, i).join(",");
        next.set(prefix, (next.get(prefix) ?? new Set()).add(token));
      });
    }
    return [...next.values()].filter((ways) => ways.size > 1).length;
  }

  it("answers 40 choices, numbered 01 to 40 and read a token at a time, through the official client", async () => {
    const choices = Array.from({ length: 40 }, (_, i) => ({ value: `queue-${i}`, ...(i % 3 === 0 ? { description: `Tickets of kind ${i}` } : {}) }));
    const decision = await client("/v1").decisions.create({ model: MODEL, input: "A customer cannot pay with a gift card.", questions: [{ type: "choice", name: "queue", instructions: "Which queue takes it?", choices }] });
    const [answer] = decision.answers as OpenAI.Decision.AnswerResourceChoice[];
    const ps = answer!.probabilities.map((p) => p.probability);
    expect(answer!.probabilities.map((p) => p.value)).toEqual(choices.map((c) => c.value));
    expect(ps.every((p) => p >= 0 && p <= 1)).toBe(true);
    expect(Math.abs(sum(ps) - 1)).toBeLessThan(1e-6);
    expect(answer!.choice).toBe(choices[argmax(ps)]!.value);
    expect(answer!.confidence).toBeCloseTo(expectedConfidence(ps), 9);
    // The tiny vocabulary writes digits one by one: more than one completion, one a branching prefix.
    const steps = await stepsFor(Array.from({ length: 40 }, (_, i) => String(i + 1).padStart(2, "0")));
    expect(steps).toBeGreaterThan(1);
    expect(decision.usage.output_tokens).toBe(steps);
  });

  it("answers System One's scale of 12 levels, numbered 00 to 11", async () => {
    const criteria = Array.from({ length: 12 }, (_, i) => `Level ${i}`);
    const answer = await ask(tcp(), "POST", "/v1/systemone", { model: MODEL, state: "The checkout is slow.", questions: { urgency: { type: "score", instructions: "How urgent?", criteria } } });
    expect(answer.status).toBe(200);
    const { urgency } = answer.json().answers;
    expect(Object.keys(urgency.legend)).toEqual(criteria.map((_, i) => String(i)));
    const ps = criteria.map((_, i) => urgency.probabilities[String(i)] as number);
    expect(Math.abs(sum(ps) - 1)).toBeLessThan(1e-6);
    expect(urgency.score).toBeCloseTo(sum(ps.map((p, i) => p * i)), 9);
    expect(answer.json().usage.output_tokens).toBe(await stepsFor(criteria.map((_, i) => String(i).padStart(2, "0"))));
  });
});

describe("a runner without a host prompt cache", () => {
  it("gives the questions to as many slots as got the input cheaply: the first, and the one that found it could not", async () => {
    const configured = await ask(tcp(), "POST", "/engines/_configure", { model: "ai/nocache", "cache-ram": 0 });
    expect(configured.status).toBe(202);
    const input = `Report ${crypto.randomUUID()}: ${"The checkout failed with errors since nine, then recovered. ".repeat(9)}`;
    const questions = Array.from({ length: 12 }, (_, i) => ({ type: "predicate" as const, instructions: `Item ${i} holds.` }));
    const { data, response } = await client("/v1").decisions.create({ model: "ai/nocache", input, questions }).withResponse();
    // A second slot had to process the input again (nothing to load it from): no third joined.
    expect(response.headers.get("x-llamadock-decision-slots")).toBe("2");
    const inputTokens = (await ask(tcp(), "POST", "/tokenize", { model: "ai/nocache", content: input })).json().tokens.length as number;
    const processed = data.usage.input_tokens - data.usage.input_tokens_details.cached_tokens;
    expect(processed).toBeGreaterThan(2 * inputTokens);
    expect(processed).toBeLessThan(3 * inputTokens + 12 * 80);
    expect(data.answers).toHaveLength(12);
  });
});

describe("a client that leaves", () => {
  it("ends its questions and gives the runner's slots back; the next request is answered", async () => {
    const questions = Array.from({ length: 400 }, (_, i) => ({ type: "predicate" as const, instructions: `Fact ${i}.` }));
    const leaving = new AbortController();
    const request = client("/v1").decisions.create({ model: MODEL, input: `Leaving ${crypto.randomUUID()}`, questions }, { signal: leaving.signal });
    setTimeout(() => leaving.abort(), 500);
    await expect(request).rejects.toThrow();
    const ps = async () => (await ask(tcp(), "GET", "/engines/ps")).json().find((r: { model_name: string }) => r.model_name === "ai/chat:latest");
    await until(async () => (await ps()).in_flight === 0, "the runner's slots given back");
    checkDecision(await client("/v1").decisions.create({ model: MODEL, input: "After the one that left.", questions: QUESTIONS }));
  });
});

describe("what the answers are", () => {
  it("the model's own next-token probabilities of the labels, renormalised over them", async () => {
    // The same prompt through chat completions, with the whole distribution of the tiny model's
    // vocabulary (320 tokens) before any sampling: the labels' share of it, renormalised, must be
    // what the decision says (to 5e-4: the two prompts reach the runner's cache in different
    // batches, and float32 logits computed in other batches differ by about 1e-4).
    const input = [{ role: "user" as const, content: "Our checkout has returned 500 errors since 9am." }];
    const question: Question = { name: null, kind: "choice", instructions: "Which team?", options: ["billing", "technical", "sales"].map((v) => ({ value: v, text: v })) };
    const decided = await client("/v1").decisions.create({ model: MODEL, input: input[0]!.content, questions: [{ type: "choice", instructions: "Which team?", choices: [{ value: "billing" }, { value: "technical" }, { value: "sales" }] }] });
    const chat = await ask(tcp(), "POST", "/v1/chat/completions", { model: MODEL, messages: questionMessages(input, question), max_tokens: 1, logprobs: true, top_logprobs: 320 });
    expect(chat.status).toBe(200);
    const top = chat.json().choices[0].logprobs.content[0].top_logprobs as { token: string; logprob: number }[];
    expect(top.length).toBeGreaterThanOrEqual(300);
    const raw = ["A", "B", "C"].map((label) => Math.exp(top.find((t) => t.token === label)!.logprob));
    const expected = raw.map((p) => p / sum(raw));
    const [answer] = decided.answers as OpenAI.Decision.AnswerResourceChoice[];
    answer!.probabilities.forEach((p, i) => expect(p.probability).toBeCloseTo(expected[i]!, 3));
  });
});

describe("System One's shape by plain requests", () => {
  const body = {
    model: MODEL,
    state: { ticket: "Our checkout has returned 500 errors since 9am.", customer: "shop-7" },
    questions: {
      outage: { type: "noul", instructions: "Is the checkout down?", criteria: { true: "It is down", false: "It works" } },
      team: { type: "choice", instructions: "Which team should handle this ticket?", criteria: { billing: "Payments and refunds", technical: null, sales: "New customers" } },
      urgency: { type: "score", instructions: ["How urgent is it?", { scale: "support" }], criteria: ["Can wait", "Today", "Now"] },
    },
  };

  function checkAnswer(answer: any) {
    expect(answer.model).toBe(MODEL);
    expect(Object.keys(answer.answers)).toEqual(["outage", "team", "urgency"]);
    const { outage, team, urgency } = answer.answers;
    expect(outage.type).toBe("noul");
    expect(outage.noul).toBeGreaterThanOrEqual(0);
    expect(outage.noul).toBeLessThanOrEqual(1);

    expect(Object.keys(team.probabilities)).toEqual(["billing", "technical", "sales"]);
    const tps = Object.values(team.probabilities) as number[];
    expect(Math.abs(sum(tps) - 1)).toBeLessThan(1e-6);
    expect(team.choice).toBe(Object.keys(team.probabilities)[argmax(tps)]);
    expect(team.confidence).toBeCloseTo(expectedConfidence(tps), 9);

    expect(urgency.legend).toEqual({ 0: "Can wait", 1: "Today", 2: "Now" });
    const ups = ["0", "1", "2"].map((k) => urgency.probabilities[k] as number);
    expect(Math.abs(sum(ups) - 1)).toBeLessThan(1e-6);
    expect(urgency.score).toBeCloseTo(sum(ups.map((p, i) => p * i)), 9);
    expect(urgency.confidence).toBeCloseTo(expectedConfidence(ups), 9);
    expect(answer.usage.output_tokens).toBe(3);
    expect(answer.usage.input_tokens).toBeGreaterThan(0);
  }

  it.each(["/v1", "/engines/v1", "/engines/llama.cpp/v1"])("answers by name under %s, by fetch", async (base) => {
    const response = await fetch(`${stack.url}${base}/systemone`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-llamadock-decision-method")).toBe("chat-next-token");
    checkAnswer(await response.json());
  });

  it("answers the official ollama client's systemone", async () => {
    const ollama = new Ollama({ host: stack.url });
    checkAnswer(await ollama.systemone(body as Parameters<Ollama["systemone"]>[0]));
  });

  it("answers over the Unix socket with the /exp/vDD4.40 prefix", async () => {
    for (const base of ["/v1", "/engines/v1", "/engines/llama.cpp/v1"]) {
      const answer = await ask(unix(), "POST", `${P}${base}/systemone`, body);
      expect(answer.status).toBe(200);
      checkAnswer(answer.json());
    }
  });
});

describe("a decision model on an engine without a decision route", () => {
  it("is asked as a chat model, says so, and is counted once", async () => {
    expect((await ask(tcp(), "GET", "/v1/models/ai/decider")).json().capabilities).toEqual({ decisions: "chat-next-token", systemone: "engine" });
    const body = { model: "ai/decider", state: "Our checkout fails.", questions: { outage: { type: "noul", instructions: "Is it down?" } } };
    for (let i = 0; i < 2; i++) {
      const before = (await ask(tcp(), "GET", "/engines/usage")).json().total;
      const answer = await ask(tcp(), "POST", "/v1/systemone", body);
      expect(answer.status).toBe(200);
      expect(answer.headers["x-llamadock-decision-method"]).toBe("chat-next-token");
      expect(answer.json().answers.outage.type).toBe("noul");
      const after = (await ask(tcp(), "GET", "/engines/usage")).json().total;
      expect([after.requests - before.requests, after.errors - before.errors]).toEqual([1, 0]);
      expect(after.prompt_tokens - before.prompt_tokens).toBe(answer.json().usage.input_tokens);
    }
  });
});

describe("errors in OpenAI's shape, and the server stays up", () => {
  const predicate = { type: "predicate", instructions: "It holds." };
  const choice = (choices: unknown[]) => ({ type: "choice", instructions: "Which?", choices });
  const score = (count: number) => ({ type: "score", instructions: "How much?", levels: Array.from({ length: count }, (_, i) => ({ label: `l${i}` })) });
  const decision = (questions: unknown[], input: unknown = "text") => ({ model: MODEL, input, questions });

  it.each<[string, string, object, number, string, RegExp]>([
    ["too many questions", "/v1/decisions", decision(Array.from({ length: 401 }, () => predicate)), 400, "invalid_request", /at most 400 questions/],
    ["no question", "/v1/decisions", decision([]), 400, "invalid_request", /at least one question/],
    ["an empty option list", "/v1/decisions", decision([choice([])]), 400, "invalid_request", /choices must not be empty/],
    ["one option", "/engines/v1/decisions", decision([choice([{ value: "a" }])]), 400, "invalid_request", /at least 2/],
    ["a duplicate option", "/v1/decisions", decision([choice([{ value: "a" }, { value: "b" }, { value: "a" }])]), 400, "invalid_request", /"a" twice/],
    ["more choices than OpenAI allows", "/v1/decisions", decision([choice(Array.from({ length: 256 }, (_, i) => ({ value: `c${i}` })))]), 400, "invalid_request", /at most 255/],
    ["a score of one level", "/v1/decisions", decision([score(1)]), 400, "invalid_request", /levels must hold at least 2/],
    ["a score of eleven levels", "/engines/llama.cpp/v1/decisions", decision([score(11)]), 400, "invalid_request", /levels may hold at most 10/],
    ["an unknown question type", "/v1/decisions", decision([{ type: "rank", instructions: "x" }]), 400, "invalid_request", /predicate, choice or score/],
    ["an image without a projector", "/v1/decisions", decision([predicate], [{ role: "user", content: [{ type: "input_image", image_url: "data:image/png;base64,AAAA" }] }]), 400, "images_not_supported", /no projector/],
    ["an embedding model", "/v1/decisions", { ...decision([predicate]), model: "ai/embedder" }, 400, "model_cannot_decide", /decisions need a chat model/],
    ["an unknown model", "/v1/decisions", { ...decision([predicate]), model: "ai/absent" }, 404, "model_not_found", /ai\/absent/],
    ["System One: empty criteria", "/v1/systemone", { model: MODEL, state: "x", questions: { a: { type: "choice", instructions: "x", criteria: {} } } }, 400, "invalid_request", /criteria must not be empty/],
    ["System One: no question", "/v1/systemone", { model: MODEL, state: "x", questions: {} }, 400, "invalid_request", /at least one question/],
  ])("%s", async (_, path, body, status, code, message) => {
    const answer = await ask(tcp(), "POST", path, body);
    expect(answer.status).toBe(status);
    expect(answer.json()).toEqual({ error: { message: expect.stringMatching(message), type: expect.any(String), code } });
  });

  it("refuses an input larger than the context, then answers the next request", async () => {
    // 4096 tokens a slot (16384 shared by four, as /engines/ps says): one character is about one token.
    const answer = await ask(tcp(), "POST", "/v1/decisions", decision([predicate], "x ".repeat(6000)));
    expect(answer.status).toBe(400);
    expect(answer.json()).toEqual({ error: { message: expect.stringMatching(/more than the \d+ of the model's context/), type: "invalid_request_error", code: "context_length_exceeded" } });
    const next = await client("/v1").decisions.create({ model: MODEL, input: "short", questions: QUESTIONS });
    checkDecision(next);
  });

  it("refuses one question whose own text does not fit, and answers the others", async () => {
    // Letters at random, which the vocabulary's merges do not shorten: about 1.4 tokens a letter
    // and its space, past the slot's 4096.
    const words = Array.from({ length: 5000 }, () => "abcdefghij"[Math.floor(Math.random() * 10)]).join(" ");
    const long = { type: "predicate" as const, name: "long", instructions: words };
    const decision = await client("/v1").decisions.create({ model: MODEL, input: "short", questions: [QUESTIONS[0]!, long] });
    expect(decision.answers[0]!.type).toBe("predicate");
    expect(decision.answers[1]).toEqual({ type: "refusal", name: "long" });
  });
});

describe("which way a model answers, where models are listed", () => {
  it("a chat model: its next token, in /v1/models, /models/{name} and Ollama's /api/show; an embedder: not at all", async () => {
    for (const base of ["/v1", "/engines/v1", "/engines/llama.cpp/v1"]) {
      const listed = (await ask(tcp(), "GET", `${base}/models`)).json().data as { id: string; capabilities?: object }[];
      expect(listed.find((m) => m.id.endsWith("ai/chat:latest"))!.capabilities).toEqual({ decisions: "chat-next-token", systemone: "chat-next-token" });
      expect(listed.find((m) => m.id.endsWith("ai/embedder:latest"))!.capabilities).toBeUndefined();
      expect((await ask(tcp(), "GET", `${base}/models/${MODEL}`)).json().capabilities).toEqual({ decisions: "chat-next-token", systemone: "chat-next-token" });
    }
    const shown = (await ask(tcp(), "POST", "/api/show", { model: MODEL })).json();
    expect(shown.capabilities).toContain("decisions");
    expect(shown.decisions).toBe("chat-next-token");
    expect(shown.systemone).toBe("chat-next-token");
    const embedder = (await ask(tcp(), "POST", "/api/show", { model: "ai/embedder" })).json();
    expect(embedder.capabilities).toEqual(["embedding"]);
    expect(embedder.decisions).toBeUndefined();
  });
});

describe("usage ledger", () => {
  it("counts a decision once, with all its questions' tokens", async () => {
    const before = (await ask(tcp(), "GET", "/engines/usage")).json().total;
    const decision = await client("/v1").decisions.create({ model: MODEL, input: "Count me.", questions: QUESTIONS });
    const after = (await ask(tcp(), "GET", "/engines/usage")).json().total;
    expect(after.requests - before.requests).toBe(1);
    expect(after.prompt_tokens - before.prompt_tokens).toBe(decision.usage.input_tokens);
    expect(after.completion_tokens - before.completion_tokens).toBe(decision.usage.output_tokens);
  });
});

describe.each<RuntimeName>(["node", "deno"])("the server under %s", (runtime) => {
  let other: Stack;
  beforeAll(async () => {
    other = await startStack({ runtime, models: [], shaped: { "ai/chat": CHAT_MODEL } });
  });
  afterAll(async () => {
    await other?.stop();
  });

  it("answers OpenAI's decisions in the runner's slots, and System One's", async () => {
    const openai = new OpenAI({ baseURL: `${other.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const { data, response } = await openai.decisions.create({ model: MODEL, input: `Under ${runtime}: the checkout is slow.`, questions: [...QUESTIONS, ...QUESTIONS] }).withResponse();
    expect(response.headers.get("x-llamadock-decision-slots")).toBe("4");
    expect(data.answers).toHaveLength(6);
    checkDecision({ ...data, answers: data.answers.slice(0, 3) }, 6);
    checkDecision({ ...data, answers: data.answers.slice(3) }, 6);
    const systemone = await ask({ url: other.url }, "POST", "/v1/systemone", { model: MODEL, state: "x", questions: { a: { type: "noul", instructions: "It holds." } } });
    expect(systemone.status).toBe(200);
    expect(systemone.json().answers.a.noul).toBeGreaterThanOrEqual(0);
  });
});

describe("prompt caches kept per key (INFERENCE_PROMPT_CACHE_PER_KEY)", () => {
  const KEYS = { alice: "sk-alice-decides-31", bob: "sk-bob-decides-47" };
  let keyed: Stack;
  beforeAll(async () => {
    keyed = await startStack({ models: [], shaped: { "ai/chat": CHAT_MODEL } });
    await writeFile(join(keyed.dir, "keys"), `${KEYS.alice} name=alice\n${KEYS.bob} name=bob\n`);
    await keyed.restart({ API_KEYS_FILE: join(keyed.dir, "keys"), INFERENCE_PROMPT_CACHE_PER_KEY: "true" });
  });
  afterAll(async () => {
    await keyed?.stop();
  });

  it("a key's questions reuse its own input; another key's on the same input reuse nothing", async () => {
    const as = (key: keyof typeof KEYS) => new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: KEYS[key], maxRetries: 0 });
    const input = `Alice's notes ${crypto.randomUUID()}: ${"the checkout failed with errors since nine. ".repeat(8)}`;
    const questions = Array.from({ length: 8 }, (_, i) => ({ type: "predicate" as const, instructions: `Item ${i} holds.` }));
    const alice = await as("alice").decisions.create({ model: MODEL, input, questions });
    expect(alice.usage.input_tokens_details.cached_tokens).toBeGreaterThan(7 * 300);
    const bob = await as("bob").decisions.create({ model: MODEL, input, questions });
    expect(bob.usage.input_tokens_details.cached_tokens).toBe(0);
    expect(bob.answers).toHaveLength(8);
  });
});

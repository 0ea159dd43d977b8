import { textAtMost } from "../http/body.ts";
import { clientGone, HttpError } from "../http/errors.ts";
import { ENGINE } from "../inference/routes.ts";
import type { Lease } from "../scheduler/runner.ts";
import { runnerFailed } from "../scheduler/errors.ts";
import { KEY_HEADER } from "../slot-cache/per-key.ts";
import { labels, messagesAround, questionMessages, questionText, SYSTEM_PROMPT, turns, type Answer, type Ask, type InputMessage, type Question } from "./core.ts";
import { chainedProbabilities, labelTree, type LabelForms, type Piece, type Step } from "./labels.ts";

// One question asked of a leased runner: its prompt through the model's chat template, one token
// generated with the labels' probabilities read (see `askOne`). And the calls it is made of.

/** Added to each label's logit: the labels outrank every other token, their ratios unchanged. */
const LABEL_BIAS = 100;

/** The sampling that leaves the model's distribution as it is: no truncation, no penalty, temperature 1. */
const PLAIN_SAMPLING = {
  temperature: 1,
  top_k: 0,
  top_p: 1,
  min_p: 0,
  typical_p: 1,
  top_n_sigma: -1,
  xtc_probability: 0,
  repeat_penalty: 1,
  presence_penalty: 0,
  frequency_penalty: 0,
  dry_multiplier: 0,
  mirostat: 0,
};

/**
 * The most an answer of llama-server's to one of these calls may weigh. The largest is a templated
 * prompt (/apply-template), about the input's size (10 MiB at most by default, INFERENCE_BODY_LIMIT),
 * a few times that where JSON escapes it; a completion's label probabilities are kilobytes.
 */
const ANSWER_LIMIT = 64 << 20;

export type Timings = { prompt_n: number; cache_n: number; predicted_n: number };

/**
 * A question's answer, the runner's slot that computed it and the tokens it took (none for a
 * refusal made here); `prompt`: its first step's prompt, its length in tokens and those of them
 * found in the slot.
 */
export type Asked = { answer: Answer; slot?: number; timings?: Timings; prompt?: { tokens: number; cached: number } };

export type RunnerCalls = {
  post(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }>;
  get(path: string): Promise<{ status: number; json: Record<string, unknown> }>;
  /** The runner's process (its fetch), for what is kept per runner. */
  process: object;
};

/**
 * JSON calls to a leased runner, under `signal` (the client, the runner's death, the request's
 * time); each answer tells the runner's watchdog it is alive. `key`: the caller's, for a runner
 * that keeps prompt caches per key (src/slot-cache/per-key.ts; it reads the body as bytes).
 */
export function runnerCalls(lease: Lease, signal: AbortSignal, model: string, client: AbortSignal, key: string | undefined): RunnerCalls {
  const headers: Record<string, string> = { "content-type": "application/json", ...(key !== undefined ? { [KEY_HEADER]: key } : {}) };
  const call = async (path: string, init: RequestInit) => {
    try {
      const response = await lease.fetch(`http://runner${path}`, { ...init, headers, signal });
      const text = await textAtMost(response, ANSWER_LIMIT, () => new Error(`it answered ${path} with more than ${ANSWER_LIMIT >> 20} MiB`));
      lease.heard();
      return { status: response.status, json: jsonOr(text) };
    } catch (error) {
      if (client.aborted) throw clientGone();
      if (signal.reason instanceof HttpError) throw signal.reason;
      throw runnerFailed(model, error);
    }
  };
  return {
    post: (path, body) => call(path, { method: "POST", body: new TextEncoder().encode(JSON.stringify(body)) }),
    get: (path) => call(path, { method: "GET" }),
    process: lease.fetch,
  };
}

/** An answer's JSON object; a text that is none (a route llama-server lacks answers plain text) as an error's message. */
function jsonOr(text: string): Record<string, unknown> {
  try {
    const json = JSON.parse(text) as unknown;
    if (json && typeof json === "object" && !Array.isArray(json)) return json as Record<string, unknown>;
  } catch {
    // not JSON: below
  }
  return { error: { message: text.slice(0, 500) } };
}

/** Each runner's labels as its model writes them (a property of the model), by the runner's process. */
const written = new WeakMap<object, Map<string, Piece[][]>>();

/**
 * Every label the questions use, with the ways the model writes it alone: "A", and " A" unless its
 * space is a token of its own (a step that writes nothing of the label, and one more completion).
 * Asked of the runner once per label and kept: one label after the other, since llama-server
 * serves a few connections at a time and one more waits for an idle one to time out (5 s).
 */
export async function labelForms(runner: RunnerCalls, questions: Question[]): Promise<LabelForms> {
  const known = written.get(runner.process) ?? new Map<string, Piece[][]>();
  written.set(runner.process, known);
  const forms: LabelForms = new Map();
  for (const label of new Set(questions.flatMap((q) => labels(q)))) {
    let ways = known.get(label);
    if (!ways) {
      const answers = await Promise.all([label, ` ${label}`].map((content) => runner.post("/tokenize", { content, with_pieces: true })));
      if (answers.some((answer) => answer.status !== 200)) throw upstream(answers.find((answer) => answer.status !== 200)!.json);
      const all = answers.map(({ json }) => (json.tokens as Piece[] | undefined) ?? []);
      const usable = all.filter((way) => way.length > 0 && way.every((t) => typeof t.piece === "string") && way[0]!.piece.trim() !== "");
      ways = [...new Map(usable.map((way) => [way.map((t) => t.id).join(","), way])).values()];
      known.set(label, ways);
    }
    forms.set(label, ways);
  }
  return forms;
}

type Probability = { id: number; prob?: number; logprob?: number };

/** A question's prompt: the model's chat template applied to the input and the question. */
export type Prompter = (question: Question) => Promise<string>;

/** The questions' prompts, and the text every one of them starts with when the template is applied once (see `prompter`). */
export type Prompts = { prompt: Prompter; start?: string };

/** Where the question's text stands in a prompt templated once for all questions. */
const QUESTION_MARK = "\uE000";

/**
 * Prompts for a request's questions. The template is applied once, with a mark where the question
 * goes, and each question's text put in its place: one call to the runner for all of them, not one
 * each. Unless the mark did not come through once, or the first question's prompt so made is not
 * the template's own for it (a template that changes what it is given): then the template is
 * applied to each question.
 */
export async function prompter(runner: RunnerCalls, input: InputMessage[], first: Question): Promise<Prompts> {
  const template = async (messages: InputMessage[]) => {
    const answer = await runner.post("/apply-template", { messages });
    if (answer.status !== 200) throw templateRefused(answer.json);
    return String(answer.json.prompt);
  };
  const each: Prompter = (question) => template(questionMessages(input, question));
  const [marked, exact] = await Promise.all([template(messagesAround(input, QUESTION_MARK)), each(first)]);
  const [before, after, ...more] = marked.split(QUESTION_MARK);
  if (after === undefined || more.length > 0) return { prompt: each };
  const placed = (question: Question) => `${before}${questionText(question)}${after}`;
  return placed(first) === exact ? { prompt: async (question) => placed(question), start: before } : { prompt: each };
}

/** `text`'s tokens as llama-server reads a prompt (its BOS first, where the model wants one). */
export async function promptTokens(runner: RunnerCalls, text: string): Promise<number[]> {
  const answer = await runner.post("/tokenize", { content: text, add_special: true });
  if (answer.status !== 200) throw upstream(answer.json, answer.status);
  return (answer.json.tokens as number[] | undefined) ?? [];
}

/** A step's answer that the prompt does not fit the slot's context (llama-server's error). */
class ContextExceeded {
  readonly json: Record<string, unknown>;
  constructor(json: Record<string, unknown>) {
    this.json = json;
  }
}

/**
 * One question, in the runner's slot `slot` (llama-server's `id_slot`) or where llama-server puts
 * it: one single-token completion for each step of its labels' tree (labels.ts; one for labels of
 * one token each), all in the slot the first went to.
 */
export async function askOne(runner: RunnerCalls, ask: Ask, question: Question, prompt: Prompter, forms: LabelForms, slot?: number): Promise<Asked> {
  const tags = labels(question);
  const unwritten = tags.filter((tag) => (forms.get(tag) ?? []).length === 0);
  if (unwritten.length > 0) return { answer: { refusal: `the model's vocabulary cannot write the labels ${unwritten.join(", ")}` } };
  const text = await prompt(question);
  const media = [...(ask.media ?? []), ...(question.media ?? [])];
  const timings: Timings = { prompt_n: 0, cache_n: 0, predicted_n: 0 };
  let sent: Asked["prompt"];
  let asked = slot;
  const step: Step = async (prefix, ids, rest) => {
    const completion = await runner.post("/completion", {
      prompt: promptWith(text, media, prefix),
      n_predict: 1,
      cache_prompt: true,
      ...(asked !== undefined ? { id_slot: asked } : {}),
      // Probabilities after sampling, and a sampling that changes nothing but the labels' bias: the
      // labels' probabilities are then in the ratio of the model's own (a bias added to every label
      // leaves their ratios as they are), renormalised over them. The grammar keeps the token
      // generated one that goes on to a label; the probabilities do not depend on it. (Before
      // sampling, llama-server reports only the model's top n tokens, where the labels need not be.)
      post_sampling_probs: true,
      n_probs: ids.length,
      logit_bias: ids.map((id) => [id, LABEL_BIAS]),
      grammar: `root ::= ${rest.map((ending) => JSON.stringify(ending)).join(" | ")}`,
      ...PLAIN_SAMPLING,
    });
    if (completion.status !== 200) throw isContextExceeded(completion.json) ? new ContextExceeded(completion.json) : upstream(completion.json, completion.status);
    const given = (completion.json.timings ?? {}) as Partial<Timings>;
    timings.prompt_n += given.prompt_n ?? 0;
    timings.cache_n += given.cache_n ?? 0;
    timings.predicted_n += given.predicted_n ?? 0;
    sent ??= { tokens: (given.prompt_n ?? 0) + (given.cache_n ?? 0), cached: given.cache_n ?? 0 };
    asked ??= completion.json.id_slot as number;
    const [first] = (completion.json.completion_probabilities ?? []) as { top_probs?: Probability[] }[];
    const probability = new Map((first?.top_probs ?? []).map((p) => [p.id, p.prob ?? Math.exp(p.logprob ?? -Infinity)]));
    return ids.map((id) => probability.get(id) ?? 0);
  };
  try {
    const answer = await chainedProbabilities(labelTree(tags, forms), tags.length, step);
    return { answer, slot: asked, timings, ...(sent ? { prompt: sent } : {}) };
  } catch (error) {
    if (!(error instanceof ContextExceeded)) throw error;
    return { answer: await contextRefusal(runner, ask.input, error.json) };
  }
}

/**
 * A step's prompt: the question's, then the tokens of the labels written so far. As tokens where
 * it is text (a prompt of strings and token ids, exactly the tokens the tree follows); with images,
 * llama-server takes only text beside them, so the tokens' text is appended.
 */
function promptWith(text: string, media: string[], prefix: Piece[]): unknown {
  if (media.length > 0) return { prompt_string: text + prefix.map((p) => p.piece).join(""), multimodal_data: media };
  return prefix.length > 0 ? [text, ...prefix.map((p) => p.id)] : text;
}

/** A prompt that shares nothing with any question's: see slots.ts, `seed`. */
const UNLIKE_ANY_PROMPT = "~~ ~~ ~~";

/** Puts a few tokens unlike any question's in slot `slot` (what else it held goes to the host prompt cache). */
export async function clearSlot(runner: RunnerCalls, slot: number): Promise<void> {
  await runner.post("/completion", { prompt: UNLIKE_ANY_PROMPT, n_predict: 0, cache_prompt: true, id_slot: slot });
}

/**
 * Cuts slot `slot` back to `tokens`, a start of what it holds: a completion of no token, whose
 * prompt llama-server finds in the slot but for its last token, and drops the rest (see tiles.ts).
 * Its answer is not read: a cut that failed leaves the slot as it was, its next step is only slower.
 */
export async function cutSlot(runner: RunnerCalls, slot: number, tokens: number[]): Promise<void> {
  await runner.post("/completion", { prompt: tokens, n_predict: 0, cache_prompt: true, id_slot: slot });
}

const isContextExceeded = (json: Record<string, unknown>) => (json.error as { type?: string } | undefined)?.type === "exceed_context_size_error";

/**
 * A question whose prompt does not fit the slot's context: the whole request's error when the
 * input alone does not fit (no question could be answered), else this question's refusal.
 */
async function contextRefusal(runner: RunnerCalls, input: InputMessage[], json: Record<string, unknown>): Promise<Answer> {
  const context = Number((json.error as { n_ctx?: number }).n_ctx ?? 0);
  const inputTokens = await templatedInputTokens(runner, input);
  if (inputTokens >= context) {
    throw new HttpError(400, "invalid_request_error", "context_length_exceeded", `the input takes ${inputTokens} tokens, more than the ${context} of the model's context (a slot's share)`);
  }
  return { refusal: "the question with the input exceeds the model's context" };
}

/** The input's tokens as the first part of every question's prompt (the system prompt and the input, templated). */
export async function templatedInputTokens(runner: RunnerCalls, input: InputMessage[]): Promise<number> {
  const template = await runner.post("/apply-template", { messages: turns([{ role: "system", content: SYSTEM_PROMPT }, ...input]) });
  const counted = await runner.post("/tokenize", { content: template.json.prompt ?? "" });
  return (counted.json.tokens as unknown[] | undefined)?.length ?? 0;
}

/** The model's chat template refused the messages (its own rules: roles in turn, a system message first...). */
function templateRefused(json: Record<string, unknown>): HttpError {
  const message = (json.error as { message?: string } | undefined)?.message ?? JSON.stringify(json).slice(0, 500);
  return new HttpError(400, "invalid_request_error", "template_refused", `the model's chat template refuses the input's messages: ${message}`);
}

/**
 * An error llama-server answered: the request's when llama-server says so (400: an image it cannot
 * read...), else the runner's.
 */
function upstream(json: Record<string, unknown>, status = 502): HttpError {
  const message = (json.error as { message?: string } | undefined)?.message ?? JSON.stringify(json).slice(0, 500);
  if (status === 400) return new HttpError(400, "invalid_request_error", "invalid_request", `${ENGINE} refused the question's prompt: ${message}`);
  return new HttpError(502, "upstream_error", "runner_error", `${ENGINE} answered: ${message}`);
}

import { clientGone, HttpError } from "../http/errors.ts";
import { ENGINE } from "../inference/routes.ts";
import type { Lease } from "../scheduler/runner.ts";
import { runnerFailed } from "../scheduler/errors.ts";
import { KEY_HEADER } from "../slot-cache/per-key.ts";
import { labels, messagesAround, questionMessages, questionText, renormalise, SYSTEM_PROMPT, turns, type Answer, type InputMessage, type Question } from "./core.ts";

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

export type Timings = { prompt_n: number; cache_n: number; predicted_n: number };

/** A question's answer, the runner's slot that computed it and the tokens it took (none for a refusal made here). */
export type Asked = { answer: Answer; slot?: number; timings?: Timings };

export type RunnerCalls = { post(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> };

/**
 * JSON posts to a leased runner, under `signal` (the client, the runner's death, the request's
 * time); each answer tells the runner's watchdog it is alive. `key`: the caller's, for a runner
 * that keeps prompt caches per key (src/slot-cache/per-key.ts; it reads the body as bytes).
 */
export function runnerCalls(lease: Lease, signal: AbortSignal, model: string, client: AbortSignal, key: string | undefined): RunnerCalls {
  const headers: Record<string, string> = { "content-type": "application/json", ...(key !== undefined ? { [KEY_HEADER]: key } : {}) };
  return {
    async post(path, body) {
      try {
        const response = await lease.fetch(`http://runner${path}`, { method: "POST", headers, body: new TextEncoder().encode(JSON.stringify(body)), signal });
        const text = await response.text();
        lease.heard();
        return { status: response.status, json: jsonOr(text) };
      } catch (error) {
        if (client.aborted) throw clientGone();
        if (signal.reason instanceof HttpError) throw signal.reason;
        throw runnerFailed(model, error);
      }
    },
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

/** Every label the questions use, with the tokens that write it alone: "A", and " A" where that is one token too. */
export async function labelTokens(runner: RunnerCalls, questions: Question[]): Promise<Map<string, number[]>> {
  const used = new Set(questions.flatMap((q) => labels(q)));
  const tokens = new Map<string, number[]>();
  await Promise.all(
    [...used].map(async (label) => {
      const forms = await Promise.all([label, ` ${label}`].map((content) => runner.post("/tokenize", { content })));
      const single = forms.map(({ json }) => json.tokens as number[] | undefined).filter((t): t is number[] => t?.length === 1);
      tokens.set(label, single.map((t) => t[0]!));
    }),
  );
  return tokens;
}

type Probability = { id: number; prob?: number; logprob?: number };

/** A question's prompt: the model's chat template applied to the input and the question. */
export type Prompter = (question: Question) => Promise<string>;

/** Where the question's text stands in a prompt templated once for all questions. */
const QUESTION_MARK = "\uE000";

/**
 * Prompts for a request's questions. The template is applied once, with a mark where the question
 * goes, and each question's text put in its place: one call to the runner for all of them, not one
 * each. Unless the mark did not come through once, or the first question's prompt so made is not
 * the template's own for it (a template that changes what it is given): then the template is
 * applied to each question.
 */
export async function prompter(runner: RunnerCalls, input: InputMessage[], first: Question): Promise<Prompter> {
  const template = async (messages: InputMessage[]) => {
    const answer = await runner.post("/apply-template", { messages });
    if (answer.status !== 200) throw templateRefused(answer.json);
    return String(answer.json.prompt);
  };
  const each: Prompter = (question) => template(questionMessages(input, question));
  const [marked, exact] = await Promise.all([template(messagesAround(input, QUESTION_MARK)), each(first)]);
  const [before, after, ...more] = marked.split(QUESTION_MARK);
  if (after === undefined || more.length > 0) return each;
  const placed = (question: Question) => `${before}${questionText(question)}${after}`;
  return placed(first) === exact ? async (question) => placed(question) : each;
}

/** One question, in the runner's slot `slot` (llama-server's `id_slot`) or where llama-server puts it. */
export async function askOne(runner: RunnerCalls, input: InputMessage[], question: Question, prompt: Prompter, tokens: Map<string, number[]>, slot?: number): Promise<Asked> {
  const tags = labels(question);
  const ids = tags.map((tag) => tokens.get(tag) ?? []);
  const unwritten = tags.filter((_, i) => ids[i]!.length === 0);
  if (unwritten.length > 0) return { answer: { refusal: `the model has no single token for the labels ${unwritten.join(", ")}` } };
  const completion = await runner.post("/completion", {
    prompt: await prompt(question),
    n_predict: 1,
    cache_prompt: true,
    ...(slot !== undefined ? { id_slot: slot } : {}),
    // Probabilities after sampling, and a sampling that changes nothing but the labels' bias: the
    // labels' probabilities are then in the ratio of the model's own (a bias added to every label
    // leaves their ratios as they are), renormalised over them. The grammar keeps the token
    // generated a label; the probabilities do not depend on it. (Before sampling, llama-server
    // reports only the model's top n tokens, where the labels need not be.)
    post_sampling_probs: true,
    n_probs: ids.flat().length,
    logit_bias: ids.flat().map((id) => [id, LABEL_BIAS]),
    grammar: `root ::= ${tags.map((tag) => JSON.stringify(tag)).join(" | ")}`,
    ...PLAIN_SAMPLING,
  });
  if (completion.status !== 200) {
    if (isContextExceeded(completion.json)) return { answer: await contextRefusal(runner, input, completion.json) };
    throw upstream(completion.json);
  }
  const given = (completion.json.timings ?? {}) as Partial<Timings>;
  const timings = { prompt_n: given.prompt_n ?? 0, cache_n: given.cache_n ?? 0, predicted_n: given.predicted_n ?? 0 };
  const [first] = (completion.json.completion_probabilities ?? []) as { top_probs?: Probability[] }[];
  const probability = new Map((first?.top_probs ?? []).map((p) => [p.id, p.prob ?? Math.exp(p.logprob ?? -Infinity)]));
  const answer = renormalise(ids.map((forms) => forms.map((id) => probability.get(id) ?? 0)));
  return { answer, slot: completion.json.id_slot as number, timings };
}

/** A prompt that shares nothing with any question's: see slots.ts, `seed`. */
const UNLIKE_ANY_PROMPT = "~~ ~~ ~~";

/** Puts a few tokens unlike any question's in slot `slot` (what else it held goes to the host prompt cache). */
export async function clearSlot(runner: RunnerCalls, slot: number): Promise<void> {
  await runner.post("/completion", { prompt: UNLIKE_ANY_PROMPT, n_predict: 0, cache_prompt: true, id_slot: slot });
}

const isContextExceeded = (json: Record<string, unknown>) => (json.error as { type?: string } | undefined)?.type === "exceed_context_size_error";

/**
 * A question whose prompt does not fit the slot's context: the whole request's error when the
 * input alone does not fit (no question could be answered), else this question's refusal.
 */
async function contextRefusal(runner: RunnerCalls, input: InputMessage[], json: Record<string, unknown>): Promise<Answer> {
  const context = Number((json.error as { n_ctx?: number }).n_ctx ?? 0);
  const template = await runner.post("/apply-template", { messages: turns([{ role: "system", content: SYSTEM_PROMPT }, ...input]) });
  const counted = await runner.post("/tokenize", { content: template.json.prompt ?? "" });
  const inputTokens = (counted.json.tokens as unknown[] | undefined)?.length ?? 0;
  if (inputTokens >= context) {
    throw new HttpError(400, "invalid_request_error", "context_length_exceeded", `the input takes ${inputTokens} tokens, more than the ${context} of the model's context (a slot's share)`);
  }
  return { refusal: "the question with the input exceeds the model's context" };
}

/** The model's chat template refused the messages (its own rules: roles in turn, a system message first...). */
function templateRefused(json: Record<string, unknown>): HttpError {
  const message = (json.error as { message?: string } | undefined)?.message ?? JSON.stringify(json).slice(0, 500);
  return new HttpError(400, "invalid_request_error", "template_refused", `the model's chat template refuses the input's messages: ${message}`);
}

/** An error llama-server answered that is not the request's fault: passed on as the runner's. */
function upstream(json: Record<string, unknown>): HttpError {
  const message = (json.error as { message?: string } | undefined)?.message ?? JSON.stringify(json).slice(0, 500);
  return new HttpError(502, "upstream_error", "runner_error", `${ENGINE} answered: ${message}`);
}

import { anySignal } from "../http/abort.ts";
import { badRequest, clientGone, HttpError } from "../http/errors.ts";
import { requestTimedOut } from "../inference/bounds.ts";
import { ENGINE, type InferenceDeps } from "../inference/routes.ts";
import { bothTimers } from "../inference/usage/meter.ts";
import { LOCAL_CALLER } from "../keys/keyring.ts";
import { modelNotFound } from "../models/errors.ts";
import { resolveOr404 } from "../models/lookup.ts";
import type { StoredModel } from "../models/index.ts";
import type { Lease } from "../scheduler/runner.ts";
import { runnerFailed } from "../scheduler/errors.ts";
import { decisionMethod } from "./capability.ts";
import { labels, questionMessages, renormalise, SYSTEM_PROMPT, turns, type Answer, type Ask, type InputMessage, type Question } from "./core.ts";

// A request's questions asked of a chat model's runner: one slot, the questions one after the
// other. Each question's prompt is the templated input plus the question, so the input is
// processed once, by the first question, and every later one reads it from the slot's prompt
// cache (llama-server's `cache_prompt`) and processes only its own text and one token.
//
// Why not the runner's other slots at once: llama-server v0.5.0 cannot hand one slot's cached
// prefix to another without processing it again there (a copy made for `n_cmpl` is dropped when
// its task ends; an entry of the host prompt cache is consumed by the first slot that loads it),
// so every further slot would cost the whole input again. On the CPUs this runs on, that is more
// work than the questions' own tokens; and a request of 400 questions keeps one slot, not all.

/** Added to each label's logit: the labels outrank every other token, their ratios unchanged. */
const LABEL_BIAS = 100;

export type Usage = { input: number; cached: number; output: number };
export type Asked = { model: string; answers: Answer[]; usage: Usage };

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
 * Answers `ask` with model `requested`: resolved, admitted for its key, counted once in the usage
 * ledger with all of its questions' tokens, its runner leased for the questions.
 */
export async function askModel(deps: InferenceDeps, request: Request, requested: string, ask: Ask & { images: boolean }): Promise<Asked> {
  const startedAt = performance.now();
  const caller = deps.identify?.(request) ?? LOCAL_CALLER;
  let name: string | undefined;
  let ticket: ReturnType<NonNullable<InferenceDeps["meter"]>["admit"]> | undefined;
  try {
    const model = await resolveOr404(deps.store, requested);
    if (deps.admits && !deps.admits(model.id)) throw modelNotFound(requested);
    name = model.tags[0] ?? model.id;
    if (!decisionMethod(model)) throw badRequest("model_cannot_decide", `model ${name} embeds or ranks and generates no text: decisions need a chat model`);
    if (ask.images) throw imagesRefused(model, name);
    ticket = deps.meter?.admit(caller, name);
    const lease = await deps.scheduler.acquire(model, "completion", request.signal, { caller: caller.name, lane: "interactive" });
    const timed = deps.metrics.timer(name, startedAt);
    const timer = ticket ? bothTimers(timed, ticket.timer) : timed;
    // Answered under the name the client gave (as it names the model in its request), counted under the model's own.
    const asked = { ...(await onRunner(deps, request, lease, name, ask)), model: requested };
    // The ledger and the latency figures read llama-server's `timings` of an answer: those of all the questions.
    timer.end(true, JSON.stringify({ timings: { cache_n: asked.usage.cached, prompt_n: asked.usage.input - asked.usage.cached, predicted_n: asked.usage.output } }));
    return asked;
  } catch (error) {
    if (ticket) ticket.fail();
    else deps.meter?.refused(caller, name);
    throw error;
  }
}

function imagesRefused(model: StoredModel, name: string): HttpError {
  if (!model.mmprojPath) return badRequest("images_not_supported", `model ${name} has no projector for images: decisions about images need a model that reads them`);
  return badRequest("images_not_supported", `decisions about images are not answered here yet (model ${name} reads images in chat completions)`);
}

async function onRunner(deps: InferenceDeps, request: Request, lease: Lease, model: string, ask: Ask): Promise<Asked> {
  const call = anySignal([request.signal, lease.died]);
  const timeout = setTimeout(() => call.abort(requestTimedOut(model, deps.bounds.timeoutMs)), deps.bounds.timeoutMs);
  const runner = runnerCalls(lease, call.signal, model, request.signal);
  lease.sending(false);
  try {
    const tokens = await labelTokens(runner, ask.questions);
    const usage: Usage = { input: 0, cached: 0, output: 0 };
    const answers: Answer[] = [];
    for (const question of ask.questions) answers.push(await askOne(runner, ask.input, question, tokens, usage));
    return { model, answers, usage };
  } finally {
    clearTimeout(timeout);
    call.dispose();
    lease.release();
  }
}

type RunnerCalls = { post(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> };

/** JSON posts to the leased runner; a runner that dies, a request out of time, a client that left: their errors. */
function runnerCalls(lease: Lease, signal: AbortSignal, model: string, client: AbortSignal): RunnerCalls {
  return {
    async post(path, body) {
      try {
        const response = await lease.fetch(`http://runner${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal });
        const json = (await response.json()) as Record<string, unknown>;
        lease.heard();
        return { status: response.status, json };
      } catch (error) {
        if (client.aborted) throw clientGone();
        if (signal.reason instanceof HttpError) throw signal.reason;
        throw runnerFailed(model, error);
      }
    },
  };
}

/** Every label the questions use, with the tokens that write it alone: "A", and " A" where that is one token too. */
async function labelTokens(runner: RunnerCalls, questions: Question[]): Promise<Map<string, number[]>> {
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

/** One question: its prompt through the chat template, one token generated, the labels' probabilities read. */
async function askOne(runner: RunnerCalls, input: InputMessage[], question: Question, tokens: Map<string, number[]>, usage: Usage): Promise<Answer> {
  const tags = labels(question);
  const ids = tags.map((tag) => tokens.get(tag) ?? []);
  const unwritten = tags.filter((_, i) => ids[i]!.length === 0);
  if (unwritten.length > 0) return { refusal: `the model has no single token for the labels ${unwritten.join(", ")}` };
  const template = await runner.post("/apply-template", { messages: questionMessages(input, question) });
  if (template.status !== 200) throw upstream(template.json);
  const completion = await runner.post("/completion", {
    prompt: template.json.prompt,
    n_predict: 1,
    cache_prompt: true,
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
    if (isContextExceeded(completion.json)) return contextRefusal(runner, input, completion.json);
    throw upstream(completion.json);
  }
  const timings = (completion.json.timings ?? {}) as { prompt_n?: number; cache_n?: number; predicted_n?: number };
  usage.input += (timings.prompt_n ?? 0) + (timings.cache_n ?? 0);
  usage.cached += timings.cache_n ?? 0;
  usage.output += timings.predicted_n ?? 0;
  const [first] = (completion.json.completion_probabilities ?? []) as { top_probs?: Probability[] }[];
  const probability = new Map((first?.top_probs ?? []).map((p) => [p.id, p.prob ?? Math.exp(p.logprob ?? -Infinity)]));
  return renormalise(ids.map((forms) => forms.map((id) => probability.get(id) ?? 0)));
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

/** An error llama-server answered that is not the request's fault: passed on as the runner's. */
function upstream(json: Record<string, unknown>): HttpError {
  const message = (json.error as { message?: string } | undefined)?.message ?? JSON.stringify(json).slice(0, 500);
  return new HttpError(502, "upstream_error", "runner_error", `${ENGINE} answered: ${message}`);
}

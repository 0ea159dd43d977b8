import * as z from "zod";
import { argmax, confidence, expectation, jsonText, MAX_CHOICES, MAX_QUESTIONS, type Answer, type Ask, type Question } from "./core.ts";
import type { Decided } from "./ask.ts";

// TypeSafe's System One (`POST /v1/systemone`, as the ollama package's `systemone` sends it): a
// `state` and named `questions` of type `noul` (the probability of true), `choice` (option keys
// mapped to descriptions, null: the key itself) and `score` (descriptions, lowest first; a
// zero-based expected score). Answered from the same core as OpenAI's decisions, by name.

/** Text, or a JSON object or array (written out as JSON for the model). */
const Content = z.union([z.string(), z.record(z.string(), z.unknown()), z.array(z.unknown())], { error: "must be text, a JSON object or an array" });
const contentText = (c: z.infer<typeof Content>) => (typeof c === "string" ? c : jsonText(c));

/** A choice's or a score's options: as many as OpenAI's choices (System One names no limit). */
const MAX_OPTIONS = MAX_CHOICES;

const countCheck = (what: string) => (count: number, context: z.RefinementCtx) => {
  if (count === 0) context.addIssue({ code: "custom", message: `${what} must not be empty` });
  else if (count < 2) context.addIssue({ code: "custom", message: `${what} must hold at least 2 entries` });
  else if (count > MAX_OPTIONS) context.addIssue({ code: "custom", message: `${what} may hold at most ${MAX_OPTIONS} entries` });
};

const QuestionBody = z.discriminatedUnion(
  "type",
  [
    z.looseObject({
      type: z.literal("choice"),
      instructions: Content,
      criteria: z.record(z.string(), z.string().nullable(), { error: "a choice's criteria must map option keys to descriptions or null" }).superRefine((c, ctx) => countCheck("criteria")(Object.keys(c).length, ctx)),
    }),
    z.looseObject({ type: z.literal("noul"), instructions: Content, criteria: z.object({ true: z.string().optional(), false: z.string().optional() }).optional() }),
    z.looseObject({
      type: z.literal("score"),
      instructions: Content,
      criteria: z.array(z.string(), { error: "a score's criteria must be an array of descriptions, lowest first" }).superRefine((c, ctx) => {
        countCheck("criteria")(c.length, ctx);
        if (new Set(c).size !== c.length) ctx.addIssue({ code: "custom", message: "criteria holds a description twice" });
      }),
    }),
  ],
  { error: "each question's type must be noul, choice or score" },
);

export const SystemOneBody = z.looseObject({
  model: z.string({ error: "model is required" }).trim().min(1, "model is required"),
  state: Content,
  questions: z.record(z.string(), QuestionBody, { error: "questions must be an object of named questions" }).superRefine((q, ctx) => {
    const count = Object.keys(q).length;
    if (count === 0) ctx.addIssue({ code: "custom", message: "questions must hold at least one question" });
    if (count > MAX_QUESTIONS) ctx.addIssue({ code: "custom", message: `questions may hold at most ${MAX_QUESTIONS} questions` });
  }),
});
export type SystemOneBody = z.infer<typeof SystemOneBody>;

export function systemOneAsk(body: SystemOneBody): Ask {
  const questions = Object.entries(body.questions).map(([name, q]): Question => {
    const base = { name, instructions: contentText(q.instructions) };
    if (q.type === "noul") {
      return { ...base, kind: "predicate", options: [{ value: true, text: q.criteria?.true ?? "Yes" }, { value: false, text: q.criteria?.false ?? "No" }] };
    }
    if (q.type === "choice") return { ...base, kind: "choice", options: Object.entries(q.criteria).map(([key, description]) => ({ value: key, text: description ?? key })) };
    return { ...base, kind: "score", options: q.criteria.map((description, i) => ({ value: String(i), text: description })) };
  });
  return { input: [{ role: "user", content: contentText(body.state) }], questions };
}

function answer(question: Question, given: Answer): Record<string, unknown> {
  if ("refusal" in given) return { type: "refusal", refusal: given.refusal };
  const { probabilities } = given;
  if (question.kind === "predicate") return { type: "noul", noul: probabilities[0] };
  const byKey = Object.fromEntries(question.options.map((o, i) => [String(o.value), probabilities[i]]));
  if (question.kind === "choice") return { type: "choice", choice: question.options[argmax(probabilities)]!.value, probabilities: byKey, confidence: confidence(probabilities) };
  return {
    type: "score",
    score: expectation(probabilities),
    legend: Object.fromEntries(question.options.map((o, i) => [String(i), o.text])),
    probabilities: byKey,
    confidence: confidence(probabilities),
  };
}

export function systemOneAnswer(asked: Decided): Record<string, unknown> {
  return {
    model: asked.model,
    answers: Object.fromEntries(asked.ask.questions.map((q, i) => [q.name, answer(q, asked.answers[i]!)])),
    usage: { input_tokens: asked.usage.input, output_tokens: asked.usage.output, cached_tokens: asked.usage.cached },
  };
}

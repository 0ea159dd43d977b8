import * as z from "zod";
import { badRequest } from "../http/errors.ts";
import { argmax, confidence, expectation, jsonText, MAX_CHOICES, MAX_LEVELS, MAX_QUESTIONS, MEDIA_MARK, hasMedia, type Answer, type Ask, type InputMessage, type Question } from "./core.ts";
import type { Decided } from "./ask.ts";

// OpenAI's Decisions API (`client.decisions.create` of the openai package, 7.57): its body checked
// with zod as the SDK sends it, made into an Ask; the answers in its shape, in question order.

const text = z.string({ error: "text must be a string" });
const InputText = z.object({ type: z.literal("input_text"), text });
const InputImage = z.object({ type: z.literal("input_image"), image_url: z.string({ error: "image_url must be a string" }) });
const InputJson = z.object({ type: z.literal("input_json"), data: z.union([z.record(z.string(), z.unknown()), z.array(z.record(z.string(), z.unknown()))], { error: "data must be an object or an array of objects" }) });
const OutputText = z.object({ type: z.literal("output_text"), text });
const Refusal = z.object({ type: z.literal("refusal"), refusal: text });
const Part = z.discriminatedUnion("type", [InputText, InputImage, InputJson, OutputText, Refusal], { error: "each content part must be input_text, input_image, input_json, output_text or refusal" });
type Part = z.infer<typeof Part>;
const content = z.union([z.string(), z.array(Part)], { error: "content must be a string or an array of parts" });

const Message = z.looseObject({ type: z.literal("message").optional(), role: z.enum(["user", "developer", "system", "assistant"], { error: "role must be user, developer, system or assistant" }), content });
const Call = z.looseObject({ type: z.enum(["function_call", "custom_tool_call"]), call_id: z.string(), name: z.string(), arguments: z.string().optional(), input: z.string().optional() });
const CallOutput = z.looseObject({ type: z.enum(["function_call_output", "custom_tool_call_output"]), call_id: z.string(), output: content });
const Item = z.union([Message, Call, CallOutput], { error: "each input item must be a message, a tool call or a tool call's output" });

const instructions = z.union([z.string(), z.array(z.discriminatedUnion("type", [InputText, InputImage, InputJson]))], { error: "instructions must be a string or an array of input_text, input_image and input_json parts" });
const name = z.string({ error: "name must be a string" }).optional();

/** Options of one question: at least two, none twice (a string and a boolean of the same text are two). */
const options = <T extends z.ZodType>(item: T, what: string, max: number, why: string, key: (option: z.infer<T>) => string) =>
  z.array(item, { error: `${what} must be an array` }).superRefine((list, context) => {
    if (list.length === 0) return context.addIssue({ code: "custom", message: `${what} must not be empty` });
    if (list.length < 2) return context.addIssue({ code: "custom", message: `${what} must hold at least 2 entries` });
    if (list.length > max) return context.addIssue({ code: "custom", message: `${what} may hold at most ${max} entries (${why})` });
    const seen = new Set<string>();
    for (const option of list) {
      const k = key(option);
      if (seen.has(k)) context.addIssue({ code: "custom", message: `${what} holds ${k.slice(2)} twice` });
      seen.add(k);
    }
  });

const Choice = z.object({ value: z.union([z.string(), z.boolean()], { error: "a choice's value must be a string or a boolean" }), description: z.string().optional() });
const Level = z.object({ label: z.string({ error: "a level's label must be a string" }), description: z.string().optional() });

const QuestionBody = z.discriminatedUnion(
  "type",
  [
    z.looseObject({ type: z.literal("predicate"), instructions, name }),
    z.looseObject({ type: z.literal("choice"), instructions, name, choices: options(Choice, "choices", MAX_CHOICES, "OpenAI's limit", (c) => `${typeof c.value === "boolean" ? "b" : "s"}:${JSON.stringify(c.value)}`) }),
    z.looseObject({ type: z.literal("score"), instructions, name, levels: options(Level, "levels", MAX_LEVELS, "OpenAI's limit", (l) => `s:${JSON.stringify(l.label)}`) }),
  ],
  { error: "each question's type must be predicate, choice or score" },
);

export const DecisionBody = z.looseObject({
  model: z.string({ error: "model is required" }).trim().min(1, "model is required"),
  input: z.union([z.string(), z.array(Item).min(1, "input must not be empty")], { error: "input must be a string or an array of messages" }),
  questions: z
    .array(QuestionBody, { error: "questions must be an array" })
    .min(1, "questions must hold at least one question")
    .max(MAX_QUESTIONS, `questions may hold at most ${MAX_QUESTIONS} questions`),
});
export type DecisionBody = z.infer<typeof DecisionBody>;

/** An input's images as they are gathered: each image's base64, in the order of its mark in the text. */
type Media = string[];

/** A part as text; an image as the mark where it stands, its data added to `media`. */
const partText = (part: Part, media: Media): string => {
  if (part.type === "input_json") return jsonText(part.data);
  if (part.type === "refusal") return part.refusal;
  if (part.type === "input_image") return (media.push(imageData(part.image_url)), MEDIA_MARK);
  return part.text;
};
const contentText = (c: string | Part[], media: Media) => (typeof c === "string" ? c : c.map((part) => partText(part, media)).filter(Boolean).join("\n\n"));

/** An image's base64: a data: URL's, or bare base64 (a remote image has been fetched into a data: URL by now, see ask.ts). */
function imageData(url: string): string {
  const data = url.startsWith("data:") ? /^data:[^,]*;base64,(.*)$/s.exec(url)?.[1] : url;
  if (data === undefined || !/^[A-Za-z0-9+/=\s_-]*$/.test(data)) {
    throw badRequest("invalid_image", "an input_image's image_url must be a base64 data: URL (or an http(s) URL, where remote media are allowed)");
  }
  return data;
}

/** An input item as a chat message: tool calls and their outputs written out as text. */
function message(item: z.infer<typeof Item>, media: Media): InputMessage {
  if (item.type === "function_call_output" || item.type === "custom_tool_call_output") {
    const output = item as z.infer<typeof CallOutput>;
    return { role: "user", content: `Output of tool call ${output.call_id}:\n${contentText(output.output, media)}` };
  }
  if (item.type === "function_call" || item.type === "custom_tool_call") {
    const call = item as z.infer<typeof Call>;
    return { role: "assistant", content: `Tool call ${call.call_id}: ${call.name}(${call.arguments ?? call.input ?? ""})` };
  }
  const said = item as z.infer<typeof Message>;
  return { role: said.role === "developer" ? "system" : said.role, content: contentText(said.content, media) };
}

/** The body as the core asks it, images as marks in the text and their data beside it. */
export function openAiAsk(body: DecisionBody): Ask {
  const media: Media = [];
  const input = typeof body.input === "string" ? [{ role: "user" as const, content: body.input }] : body.input.map((item) => message(item, media));
  const questions = body.questions.map((q): Question => {
    const own: Media = [];
    const base = { name: q.name ?? null, instructions: contentText(q.instructions, own), ...(own.length > 0 ? { media: own } : {}) };
    if (q.type === "predicate") return { ...base, kind: "predicate", options: [{ value: true, text: "yes" }, { value: false, text: "no" }] };
    if (q.type === "choice") return { ...base, kind: "choice", options: q.choices.map((c) => ({ value: c.value, text: String(c.value), ...(c.description ? { description: c.description } : {}) })) };
    return { ...base, kind: "score", options: q.levels.map((l) => ({ value: l.label, text: l.label, ...(l.description ? { description: l.description } : {}) })) };
  });
  const ask = { input, questions, ...(media.length > 0 ? { media } : {}) };
  if (hasMedia(ask)) refuseStrayMarks(body);
  return ask;
}

/** Text that holds the mark itself would put an image where there is none: refused (400), not altered. */
function refuseStrayMarks(body: DecisionBody): void {
  const texts: string[] = [];
  JSON.stringify(body, (key, value: unknown) => {
    if (typeof value === "string" && key !== "image_url") texts.push(value);
    return value;
  });
  if (texts.some((text) => text.includes(MEDIA_MARK))) throw badRequest("invalid_request", `a text holds ${MEDIA_MARK}, which marks where an image goes: remove it from a request with images`);
}

/** One answer in OpenAI's shape. */
function answer(question: Question, given: Answer): Record<string, unknown> {
  if ("refusal" in given) return { type: "refusal", name: question.name };
  const { probabilities } = given;
  if (question.kind === "predicate") return { type: "predicate", name: question.name, probability: probabilities[0] };
  if (question.kind === "choice") {
    return {
      type: "choice",
      name: question.name,
      choice: question.options[argmax(probabilities)]!.value,
      confidence: confidence(probabilities),
      probabilities: question.options.map((o, i) => ({ value: o.value, probability: probabilities[i] })),
    };
  }
  return {
    type: "score",
    name: question.name,
    score: expectation(probabilities),
    confidence: confidence(probabilities),
    probabilities: question.options.map((o, i) => ({ label: o.text, value: i, probability: probabilities[i] })),
  };
}

export function openAiDecision(asked: Decided): Record<string, unknown> {
  const { usage } = asked;
  return {
    model: asked.model,
    answers: asked.ask.questions.map((q, i) => answer(q, asked.answers[i]!)),
    usage: {
      input_tokens: usage.input,
      input_tokens_details: { cached_tokens: usage.cached, cache_write_tokens: 0 },
      output_tokens: usage.output,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: usage.input + usage.output,
    },
  };
}

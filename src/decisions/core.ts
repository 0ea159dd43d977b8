// Decisions answered by a chat model: the pure part. Each question's options get short labels;
// the question goes after the input in the model's chat template; the model's next-token
// probabilities for the labels, renormalised over the labels, are the answer. Nothing here talks
// to a runner: question.ts and slots.ts do, with the prompts and labels made here.

/** One option of a question: what the client names it, how the model is told of it. */
export type Option = { value: string | boolean; text: string; description?: string };

export type QuestionKind = "predicate" | "choice" | "score";

/** A question as both dialects ask it (src/decisions/openai.ts, src/decisions/systemone.ts). */
export type Question = {
  name: string | null;
  kind: QuestionKind;
  /** The question's instructions as text (JSON parts written out as JSON). */
  instructions: string;
  /** predicate: [true, false]; choice: the choices; score: the levels, lowest first. */
  options: Option[];
  /** The images of its instructions (base64), in the order of their marks (MEDIA_MARK) in them. */
  media?: string[];
};

/** One message of the input, as llama-server's chat template takes it (roles: system, user, assistant). */
export type InputMessage = { role: "system" | "user" | "assistant"; content: string };

/** The input and its questions: the same for every dialect. `media`: the input's images (base64), in the order of their marks in its text. */
export type Ask = { input: InputMessage[]; questions: Question[]; media?: string[] };

/** Whether the input or a question holds an image. */
export const hasMedia = (ask: Ask): boolean => (ask.media?.length ?? 0) > 0 || ask.questions.some((q) => (q.media?.length ?? 0) > 0);

/** Where an image stands in a prompt's text: llama-server's (its multimodal library's) default mark. */
export const MEDIA_MARK = "<__media__>";

/** Each option's probability, in the options' order, summing to 1; or a refusal and why. */
export type Answer = { probabilities: number[] } | { refusal: string };

/** The most questions one request may ask (OpenAI's limit). */
export const MAX_QUESTIONS = 400;
/** A score's levels (OpenAI's limit): labelled 0–9, one digit each. */
export const MAX_LEVELS = 10;
/** Choices (OpenAI's limit): lettered up to 26, numbered past that. */
export const MAX_CHOICES = 255;

const LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const DIGITS = "0123456789";

/**
 * Each option's label: Y and N for a predicate (true first), digits for a score's levels, letters
 * for choices: one character each, which most vocabularies hold as one token, so that no option
 * is favoured by taking more tokens to write. Past ten levels (which only System One asks) or 26
 * choices, numbers of one width (choices from 1, levels from 0: "01"…"40"), read a token at a
 * time where they take several (labels.ts); one width, so that no label is the start of another.
 */
export function labels(question: Pick<Question, "kind" | "options">): string[] {
  const count = question.options.length;
  if (question.kind === "predicate") return ["Y", "N"];
  if (question.kind === "score" && count <= DIGITS.length) return [...DIGITS.slice(0, count)];
  if (question.kind === "choice" && count <= LETTERS.length) return [...LETTERS.slice(0, count)];
  const first = question.kind === "score" ? 0 : 1;
  const width = String(first + count - 1).length;
  return Array.from({ length: count }, (_, i) => String(first + i).padStart(width, "0"));
}

/** What the model is told to follow, before the input. */
export const SYSTEM_PROMPT =
  "You answer one question about the input below. Reply with the label of your answer only, nothing else.";

/** The question as the model reads it after the input, its options labelled. */
export function questionText(question: Question): string {
  const tags = labels(question);
  const described = (option: Option) => (option.description ? `${option.text}: ${option.description}` : option.text);
  if (question.kind === "predicate") {
    const [yes, no] = question.options;
    return `Statement: ${question.instructions}\nIs the statement true of the input? Answer Y (${described(yes!)}) or N (${described(no!)}).`;
  }
  const lines = question.options.map((option, i) => `${tags[i]}. ${described(option)}`);
  const head = question.kind === "score" ? "Levels, from lowest to highest:" : "Options:";
  return `Question: ${question.instructions}\n${head}\n${lines.join("\n")}\nAnswer with the label of one ${question.kind === "score" ? "level" : "option"} only.`;
}

/**
 * The chat messages of one question: the input, then the question. The question joins the input's
 * last user message (after a blank line) rather than following it as a message of its own: chat
 * templates that want user and assistant turns to alternate refuse two user messages in a row.
 * Every question's messages then differ only at the end, so all of a request's prompts share the
 * templated input as their prefix, which the runner's prompt cache keeps.
 */
export const questionMessages = (input: InputMessage[], question: Question): InputMessage[] => messagesAround(input, questionText(question));

/** The input's messages with `text` where a question goes (see questionMessages). */
export function messagesAround(input: InputMessage[], text: string): InputMessage[] {
  const messages = turns([{ role: "system", content: SYSTEM_PROMPT }, ...input]);
  const last = messages.at(-1)!;
  if (last.role === "user") messages[messages.length - 1] = { role: "user", content: `${last.content}\n\n${text}` };
  else messages.push({ role: "user", content: text });
  return messages;
}

/** Messages of one role in a row made one (a blank line between): templates that want turns to alternate take them so. */
export function turns(messages: InputMessage[]): InputMessage[] {
  const merged: InputMessage[] = [];
  for (const message of messages) {
    const last = merged.at(-1);
    if (last?.role === message.role) merged[merged.length - 1] = { role: last.role, content: `${last.content}\n\n${message.content}` };
    else merged.push(message);
  }
  return merged;
}

/**
 * The options' probabilities from the probabilities the runner gave each label's tokens (a label
 * may be written by more than one token, e.g. "A" and " A": their probabilities add up),
 * renormalised over the labels. A refusal when the labels got no probability at all.
 */
export function renormalise(tokenProbabilities: number[][]): Answer {
  const mass = tokenProbabilities.map((ps) => ps.reduce((sum, p) => sum + (Number.isFinite(p) && p > 0 ? p : 0), 0));
  const total = mass.reduce((sum, p) => sum + p, 0);
  if (!(total > 0)) return { refusal: "the model gave none of the labels any probability" };
  return { probabilities: mass.map((p) => p / total) };
}

/** The most probable option's index (the first of equals). */
export function argmax(probabilities: number[]): number {
  let best = 0;
  for (let i = 1; i < probabilities.length; i++) if (probabilities[i]! > probabilities[best]!) best = i;
  return best;
}

/** A score: the expected level, levels counted from 0 (the lowest) up. */
export const expectation = (probabilities: number[]): number => probabilities.reduce((sum, p, i) => sum + p * i, 0);

/**
 * How concentrated the probability is: 1 minus the distribution's entropy over that of equal
 * odds, so 1 when one option holds all of it and 0 when all are equally likely. It says how sure
 * the model is, not how often it is right.
 */
export function confidence(probabilities: number[]): number {
  if (probabilities.length < 2) return 1;
  const entropy = probabilities.reduce((sum, p) => (p > 0 ? sum - p * Math.log(p) : sum), 0);
  return Math.min(1, Math.max(0, 1 - entropy / Math.log(probabilities.length)));
}

/** The text of a part that is JSON (input_json, System One's objects): written out for the model. */
export const jsonText = (data: unknown): string => JSON.stringify(data, null, 2);

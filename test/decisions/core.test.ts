import { describe, expect, it } from "vitest";
import { argmax, confidence, expectation, labels, questionMessages, renormalise, SYSTEM_PROMPT, turns, type Question } from "../../src/decisions/core.ts";

// The pure part of decisions: labels, prompts, renormalisation and the figures of an answer.

const option = (text: string) => ({ value: text, text });
const choice = (count: number): Question => ({ name: null, kind: "choice", instructions: "Which?", options: Array.from({ length: count }, (_, i) => option(`o${i}`)) });
const score = (count: number): Question => ({ ...choice(count), kind: "score" });
const predicate: Question = { name: "p", kind: "predicate", instructions: "It rains.", options: [{ value: true, text: "yes" }, { value: false, text: "no" }] };

describe("labels", () => {
  it.each<[string, Question, string[]]>([
    ["a predicate: Y then N", predicate, ["Y", "N"]],
    ["choices: letters", choice(3), ["A", "B", "C"]],
    ["26 choices: A to Z", choice(26), [..."ABCDEFGHIJKLMNOPQRSTUVWXYZ"]],
    ["a score: digits from 0", score(3), ["0", "1", "2"]],
    ["ten levels: 0 to 9", score(10), [..."0123456789"]],
    ["System One's longer scales: numbers of one width from 0", score(12), ["00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11"]],
    ["27 choices: numbers of one width from 1", choice(27), Array.from({ length: 27 }, (_, i) => String(i + 1).padStart(2, "0"))],
    ["255 choices: three digits each", choice(255), Array.from({ length: 255 }, (_, i) => String(i + 1).padStart(3, "0"))],
  ])("%s", (_, question, expected) => {
    expect(labels(question)).toEqual(expected);
  });
});

describe("renormalise", () => {
  it.each<[string, number[][], number[] | "refusal"]>([
    ["two labels", [[0.2], [0.6]], [0.25, 0.75]],
    ["a label written two ways adds up", [[0.1, 0.1], [0.2]], [0.5, 0.5]],
    ["a label never seen gets 0", [[0.3], []], [1, 0]],
    ["already normalised stays", [[0.5], [0.25], [0.25]], [0.5, 0.25, 0.25]],
    ["tiny probabilities keep their ratio", [[3e-9], [1e-9]], [0.75, 0.25]],
    ["non-finite and negative ones count as 0", [[Number.NaN, 0.4], [-1, 0.4]], [0.5, 0.5]],
    ["no probability at all: a refusal", [[0], []], "refusal"],
  ])("%s", (_, given, expected) => {
    const answer = renormalise(given);
    if (expected === "refusal") return expect(answer).toHaveProperty("refusal");
    expect("probabilities" in answer).toBe(true);
    const { probabilities } = answer as { probabilities: number[] };
    probabilities.forEach((p, i) => expect(p).toBeCloseTo(expected[i]!, 12));
    expect(Math.abs(probabilities.reduce((a, b) => a + b, 0) - 1)).toBeLessThan(1e-12);
  });
});

describe("the figures of an answer", () => {
  it.each<[number[], number, number, number]>([
    // probabilities, argmax, expectation (levels 0, 1, ...), confidence
    [[1, 0], 0, 0, 1],
    [[0, 1], 1, 1, 1],
    [[0.5, 0.5], 0, 0.5, 0],
    [[0.25, 0.25, 0.25, 0.25], 0, 1.5, 0],
    [[0, 0, 1], 2, 2, 1],
    [[0.1, 0.2, 0.7], 2, 1.6, 1 - (-(0.1 * Math.log(0.1) + 0.2 * Math.log(0.2) + 0.7 * Math.log(0.7)) / Math.log(3))],
  ])("%j", (ps, best, expected, sure) => {
    expect(argmax(ps)).toBe(best);
    expect(expectation(ps)).toBeCloseTo(expected, 12);
    expect(confidence(ps)).toBeCloseTo(sure, 12);
  });
});

describe("questionMessages", () => {
  it("joins the question to the input's last user message, so every question shares the input as a prefix", () => {
    const input = [{ role: "user" as const, content: "The checkout fails." }];
    const [a, b] = [predicate, choice(2)].map((q) => questionMessages(input, q));
    expect(a![0]).toEqual({ role: "system", content: SYSTEM_PROMPT });
    expect(a).toHaveLength(2);
    expect(a![1]!.content.startsWith("The checkout fails.\n\nStatement: It rains.")).toBe(true);
    expect(b![1]!.content.startsWith("The checkout fails.\n\nQuestion: Which?\nOptions:\nA. o0\nB. o1")).toBe(true);
  });

  it("asks in a user message of its own after an assistant's", () => {
    const messages = questionMessages([{ role: "user", content: "hi" }, { role: "assistant", content: "hello" }], score(2));
    expect(messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user"]);
    expect(messages[3]!.content).toMatch(/^Question: Which\?\nLevels, from lowest to highest:\n0\. o0\n1\. o1\n/);
  });

  it("names the predicate's descriptions beside Y and N", () => {
    const [, user] = questionMessages([{ role: "user", content: "x" }], { ...predicate, options: [{ value: true, text: "It is down", description: "no page loads" }, { value: false, text: "It works" }] });
    expect(user!.content).toContain("Answer Y (It is down: no page loads) or N (It works).");
  });

  it("makes messages of one role in a row one", () => {
    expect(turns([{ role: "system", content: "a" }, { role: "system", content: "b" }, { role: "user", content: "c" }, { role: "user", content: "d" }])).toEqual([
      { role: "system", content: "a\n\nb" },
      { role: "user", content: "c\n\nd" },
    ]);
  });
});

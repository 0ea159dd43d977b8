import { describe, expect, it } from "vitest";
import { chainedProbabilities, endings, labelTree, NEGLIGIBLE, type LabelForms, type Piece, type Step } from "../../src/decisions/labels.ts";

// Labels read a token at a time: the tree of the ways they are written, and the chain rule over
// it. The runner's step is a table here (what the model would give each token after a prefix);
// test/decisions/decisions.test.ts asks the real llama-server.

/** A made-up vocabulary: each token's id by its text. */
const vocabulary = new Map<string, number>();
const token = (piece: string): Piece => ({ id: vocabulary.get(piece) ?? vocabulary.set(piece, vocabulary.size).get(piece)!, piece });
const pieceOf = (id: number) => [...vocabulary].find(([, i]) => i === id)![0];
/** Each label's ways of being written, each way a list of tokens' texts. */
const formsOf = (entries: Record<string, string[][]>): LabelForms => new Map(Object.entries(entries).map(([label, ways]) => [label, ways.map((way) => way.map(token))]));
/** Labels written one character a token, one way each. */
const byCharacter = (tags: string[]) => formsOf(Object.fromEntries(tags.map((t) => [t, [[...t]]])));

/** A step that reads a table: the text so far -> the next token's text -> the model's (unnormalised) probability. */
function tableStep(table: Record<string, Record<string, number>>, asked: string[] = []): Step {
  return async (prefix, ids) => {
    const at = prefix.map((p) => p.piece).join("");
    asked.push(at);
    return ids.map((id) => table[at]?.[pieceOf(id)] ?? 0);
  };
}

const sum = (ps: number[]) => ps.reduce((a, b) => a + b, 0);

describe("chained label probabilities", () => {
  it("labels of one token each: one step, renormalised; two ways of writing one label add up", async () => {
    const tree = labelTree(["A", "B"], formsOf({ A: [["A"], [" A"]], B: [["B"]] }));
    const asked: string[] = [];
    const answer = await chainedProbabilities(tree, 2, tableStep({ "": { A: 0.2, " A": 0.2, B: 0.4 } }, asked));
    expect(asked).toEqual([""]);
    expect(answer).toEqual({ probabilities: [0.5, 0.5] });
  });

  it("labels of several tokens: the product of each step's renormalised probability", async () => {
    const tree = labelTree(["01", "02", "10"], byCharacter(["01", "02", "10"]));
    const asked: string[] = [];
    const answer = await chainedProbabilities(tree, 3, tableStep({ "": { "0": 0.3, "1": 0.1 }, "0": { "1": 0.2, "2": 0.6 } }, asked));
    // "1" has one way on ("10"): no step for it.
    expect(asked).toEqual(["", "0"]);
    const { probabilities } = answer as { probabilities: number[] };
    expect(probabilities[0]).toBeCloseTo(0.75 * 0.25, 12);
    expect(probabilities[1]).toBeCloseTo(0.75 * 0.75, 12);
    expect(probabilities[2]).toBeCloseTo(0.25, 12);
    expect(Math.abs(sum(probabilities) - 1)).toBeLessThan(1e-12);
  });

  it("a branch below the negligible share is not asked: its labels share it equally, the sum stays 1", async () => {
    const tags = ["00", "01", "10", "11"];
    const tree = labelTree(tags, byCharacter(tags));
    const asked: string[] = [];
    const tiny = NEGLIGIBLE / 10;
    const answer = await chainedProbabilities(tree, 4, tableStep({ "": { "0": 1 - tiny, "1": tiny }, "0": { "0": 0.5, "1": 0.5 } }, asked));
    expect(asked).toEqual(["", "0"]);
    const { probabilities } = answer as { probabilities: number[] };
    expect(probabilities[2]).toBeCloseTo(tiny / 2, 15);
    expect(probabilities[3]).toBeCloseTo(tiny / 2, 15);
    expect(Math.abs(sum(probabilities) - 1)).toBeLessThan(1e-12);
  });

  it("no probability for any label at a step: a refusal", async () => {
    const tree = labelTree(["01", "02", "10"], byCharacter(["01", "02", "10"]));
    const answer = await chainedProbabilities(tree, 3, tableStep({ "": { "0": 1 } }));
    expect(answer).toHaveProperty("refusal");
  });

  it("a step's grammar names what is left of each label from there", () => {
    const tree = labelTree(["01", "02", "10"], formsOf({ "01": [["0", "1"], [" 0", "1"]], "02": [["0", "2"]], "10": [["10"]] }));
    expect(endings(tree).sort()).toEqual([" 01", "01", "02", "10"]);
    expect(endings(tree.next.get(token("0").id)!.node).sort()).toEqual(["1", "2"]);
  });
});

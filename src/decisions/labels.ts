import { renormalise, type Answer } from "./core.ts";

// A question's labels as the runner's tokens, and their probabilities read one token at a time.
//
// A label may be written in more than one way ("A" and " A"), and a label may take several tokens
// ("117" where the vocabulary holds digits one by one). The ways a question's labels are written
// make a tree of tokens; a label's probability is the product of the probabilities of its tokens
// along its path (the chain rule), each step renormalised over the tokens that go on to some label
// from there, which is what a grammar allowing only the labels makes of the model's own. A step
// with one way on costs nothing (its probability is 1); one with several is one single-token
// completion of the runner's.

/** A token and its text. */
export type Piece = { id: number; piece: string };
/** Every way (a token sequence) each label is written alone, by label. */
export type LabelForms = Map<string, Piece[][]>;

/** A point in the tree: the option whose label ends here, or the tokens that go on from here. */
export type LabelNode = { option?: number; next: Map<number, { piece: string; node: LabelNode }> };

/**
 * The tree of the ways the labels are written, `tags[i]` labelling option i. Labels of one width
 * (see core.ts, `labels`) never start another, so a label ends only at a leaf; were one to end
 * where another goes on, the shorter is taken (its path ends there).
 */
export function labelTree(tags: string[], forms: LabelForms): LabelNode {
  const root: LabelNode = { next: new Map() };
  tags.forEach((tag, option) => {
    for (const form of forms.get(tag) ?? []) {
      let node = root;
      for (const { id, piece } of form) {
        let edge = node.next.get(id);
        if (!edge) node.next.set(id, (edge = { piece, node: { next: new Map() } }));
        node = edge.node;
      }
      if (form.length > 0) node.option ??= option;
    }
  });
  return root;
}

/** The probabilities of `tokens` as the next one after `prefix`, as the runner gives them (not renormalised). */
export type Step = (prefix: Piece[], tokens: number[], rest: string[]) => Promise<number[]>;

/**
 * Below this share of the question's probability a branch is not asked further: its labels share
 * it equally. What the model would have split it by moves none of them by more than this.
 */
export const NEGLIGIBLE = 1e-6;

/** Each option's probability, summing to 1; a refusal when the labels got no probability at some step. */
export async function chainedProbabilities(root: LabelNode, options: number, step: Step): Promise<Answer> {
  const probabilities = new Array<number>(options).fill(0);
  const walk = async (node: LabelNode, prefix: Piece[], mass: number): Promise<string | undefined> => {
    if (node.option !== undefined) {
      probabilities[node.option]! += mass;
      return undefined;
    }
    const edges = [...node.next.entries()];
    if (edges.length === 0) return undefined;
    if (edges.length === 1) return walk(edges[0]![1].node, [...prefix, { id: edges[0]![0], piece: edges[0]![1].piece }], mass);
    if (prefix.length > 0 && mass < NEGLIGIBLE) return void share(node, mass, probabilities);
    const given = renormalise((await step(prefix, edges.map(([id]) => id), endings(node))).map((p) => [p]));
    if ("refusal" in given) return given.refusal;
    // One branch after the other, deepest first: each step's prompt extends the last one's, which the slot still holds.
    for (const [i, [id, edge]] of edges.entries()) {
      const refused = await walk(edge.node, [...prefix, { id, piece: edge.piece }], mass * given.probabilities[i]!);
      if (refused) return refused;
    }
    return undefined;
  };
  const refused = await walk(root, [], 1);
  return refused ? { refusal: refused } : { probabilities };
}

/** The texts that end a label from `node` on (a grammar's alternatives). */
export function endings(node: LabelNode): string[] {
  const out = new Set<string>();
  const visit = (at: LabelNode, text: string) => {
    if (at.option !== undefined) return void out.add(text);
    for (const edge of at.next.values()) visit(edge.node, text + edge.piece);
  };
  visit(node, "");
  return [...out];
}

/** `mass` shared equally by the ways of writing a label under `node`. */
function share(node: LabelNode, mass: number, probabilities: number[]): void {
  const leaves: number[] = [];
  const visit = (at: LabelNode) => (at.option !== undefined ? leaves.push(at.option) : at.next.forEach((edge) => visit(edge.node)));
  visit(node);
  for (const option of leaves) probabilities[option]! += mass / leaves.length;
}

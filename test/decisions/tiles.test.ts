import { describe, expect, it } from "vitest";
import { TILE_TOKENS, tiles } from "../../src/decisions/tiles.ts";

// Where a slot is cut back after a question, so that its next step processes a tile of tokens
// (src/decisions/tiles.ts). Token ids are made up; test/decisions/decisions.test.ts counts the
// tokens the real llama-server processes.

/** A shared start of `length` tokens (ids 0, 1, 2...). */
const startOf = (length: number) => Array.from({ length }, (_, i) => i);
/** A question's first step: its prompt's length, and the tokens of it found in the slot. */
const sent = (tokens: number, cached = 0) => ({ tokens, cached });

describe("a request's cuts", () => {
  it.each<[string, number[], number | undefined]>([
    // The start, and what the questions add to it: a cut keeps the start less what the shortest lacks to make a tile, and 8 besides.
    ["a question of 60 tokens", [60], 1000 - (TILE_TOKENS + 8 - 60)],
    ["one of 20", [20], 1000 - (TILE_TOKENS + 8 - 20)],
    ["one of 70: the start less 8 (where it meets the question)", [70], 1000 - 8],
    ["one of 100: less 8 still (its text may be shared with the others)", [100], 1000 - 8],
    ["a shorter one after: cut for the shortest", [60, 30], 1000 - (TILE_TOKENS + 8 - 30)],
    ["a longer one after: cut for the shortest still", [30, 90], 1000 - (TILE_TOKENS + 8 - 30)],
    ["questions of 128 tokens or more make a tile as they are: none", [128], undefined],
  ])("%s", (_, questions, kept) => {
    const cuts = tiles(startOf(1000));
    const cut = questions.map((q) => cuts.cutAfter(sent(1000 + q), undefined)).at(-1);
    expect(cut?.length).toBe(kept);
    if (cut) expect(cut).toEqual(startOf(kept!)); // a start of the shared start, as it is
  });

  it("none for a question whose prompt is not past the start (none sent, or a refusal made before)", () => {
    const cuts = tiles(startOf(1000));
    expect(cuts.cutAfter(undefined, undefined)).toBeUndefined();
    expect(cuts.cutAfter(sent(1000), undefined)).toBeUndefined();
  });

  it("none where the start is shorter than the cut", () => {
    // A question of 10 tokens lacks 62 (with the 8): a start of 62 would be cut whole.
    expect(tiles(startOf(62)).cutAfter(sent(62 + 10), undefined)).toBeUndefined();
    expect(tiles(startOf(70)).cutAfter(sent(70 + 10), undefined)?.length).toBe(8);
  });

  it("none from a step after a cut that found not half of what the cut kept: the runner reuses nothing of its slots", () => {
    const cuts = tiles(startOf(1000));
    const kept = cuts.cutAfter(sent(1060), undefined)!.length;
    // Another slot's question, read from what its slot held: cut as before.
    expect(cuts.cutAfter(sent(1060, 990), undefined)?.length).toBe(kept);
    // This slot's next question found its cut: cut again.
    expect(cuts.cutAfter(sent(1060, kept), kept)?.length).toBe(kept);
    // A few tokens fewer (the tokenizer merged the cut's last ones otherwise in the prompt): cut still.
    expect(cuts.cutAfter(sent(1060, kept - 3), kept)?.length).toBe(kept);
    // Then one found nothing (a runner whose prompts are shared by keys processes every prompt whole): no more cuts, in any slot.
    expect(cuts.cutAfter(sent(1060, 0), kept)).toBeUndefined();
    expect(cuts.cutAfter(sent(1060, 990), undefined)).toBeUndefined();
  });
});

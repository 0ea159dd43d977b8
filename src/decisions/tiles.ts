// Each slot cut back after a question, so that its next question's step processes a tile of tokens.
//
// A slot that holds the input processes only what sets a question apart from the slot's last one:
// 30 to 60 tokens, a batch that llama.cpp takes worst on a CPU. Its flash attention there (on by
// default) takes a batch's query tokens in tiles of 64 (ggml-cpu, GGML_FA_TILE_Q), and a batch of
// fewer one token at a time against every cached token. On the tiny chat model (one thread), over
// 2.3k cached tokens 63 new tokens took 127 ms and 64 took 6 ms, where the whole 2.3k-token prompt
// processed anew took 89 ms; over 4k, 427 ms against 12 ms. So, after each question, its slot is
// cut back to the start all the questions share (the templated input) less what the shortest
// question lacks to make a tile: one more call per question (a completion of no token, whose
// prompt the slot holds but for its last token, which is processed again), a few more tokens in
// each step, and steps many times cheaper. (With several slots at once, llama.cpp splits a batch
// into equal shares per slot: a step beside another slot's cut is processed as one token, then
// the rest, still a tile.)
//
// On runners on a GPU the steps are left as they were: the cut would cost a call and tokens there,
// and what CUDA's attention makes of a small batch was not measured.

/** llama.cpp's CPU flash attention takes a batch of this many query tokens or more in tiles. */
export const TILE_TOKENS = 64;
/**
 * Tokens cut besides: the last tokens of the shared start, which a tokenizer may merge with a
 * question's first, and room for a question shorter than the shortest seen (the next one is not
 * known yet).
 */
const SLACK_TOKENS = 8;
/**
 * Questions this long (in tokens past the shared start) are not cut for: their steps make a tile
 * as they are, unless the questions share most of their text.
 */
const LONG_QUESTION_TOKENS = 2 * TILE_TOKENS;

export type Tiles = {
  /** The tokens of the start all prompts share (the seeding's measure of the input). */
  start: number[];
  /**
   * Where to cut the slot of a question whose first step sent `prompt`, the slot last cut to
   * `kept` tokens (none: not cut yet); undefined when its next step makes a tile as it is.
   */
  cutAfter(prompt: { tokens: number; cached: number } | undefined, kept: number | undefined): number[] | undefined;
};

/**
 * A request's cuts, `start` being its questions' shared start in tokens. A cut keeps `start` less
 * what the shortest question seen lacks to make a tile (and the slack): a slot cut there holds a
 * start of every question's prompt, so its next step processes the rest of that prompt, the part
 * of the question shared with the others included (a step without a cut processes only what
 * differs from the slot's last question). None once a step after a cut found not even half of
 * what the cut kept: that runner reuses nothing of its slots here (the key's prompts are not its
 * alone, see src/slot-cache/per-key.ts), and a cut would be a whole prompt more.
 */
export function tiles(start: number[]): Tiles {
  let shortest = Infinity;
  let reused = true;
  return {
    start,
    cutAfter(prompt, kept) {
      if (kept !== undefined && prompt && prompt.cached < kept / 2) reused = false;
      if (!reused || !prompt || prompt.tokens <= start.length) return undefined;
      shortest = Math.min(shortest, prompt.tokens - start.length);
      if (shortest >= LONG_QUESTION_TOKENS) return undefined;
      const keep = start.length - Math.max(SLACK_TOKENS, TILE_TOKENS + SLACK_TOKENS - shortest);
      return keep > 0 ? start.slice(0, keep) : undefined;
    },
  };
}

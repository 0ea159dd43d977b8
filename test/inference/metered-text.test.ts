import { describe, expect, it } from "vitest";
import { edges, meteredText, TAIL_BYTES } from "../../src/inference/metered-text.ts";

// What the meters read of an answer: a stream's first chunk's start and its last chunks' end, a
// whole answer's start and end; never more than TAIL_BYTES of each.

const bytes = (text: string) => new TextEncoder().encode(text);
const TIMINGS = 'data: {"timings":{"prompt_n":2,"predicted_n":1}}\n\n';

describe("meteredText", () => {
  it("gives a short stream's chunks as one text, in order", () => {
    const chunks = [bytes('data: {"a":1}\n\n'), bytes(TIMINGS), bytes("data: [DONE]\n\n")];
    expect(meteredText(chunks[0], chunks, 3)).toBe(`data: {"a":1}\n\n${TIMINGS}data: [DONE]\n\n`);
  });

  it("keeps at most TAIL_BYTES of the last chunks, and the first chunk's start apart", () => {
    const long = bytes(`data: ${"x".repeat(3 * TAIL_BYTES)}\n\n`);
    const head = bytes('data: {"usage":{"prompt_tokens":7}}\n\n');
    const text = meteredText(head, [long, bytes(TIMINGS), bytes("data: [DONE]\n\n")], 40);
    expect(text.startsWith('data: {"usage":{"prompt_tokens":7}}\n\n\n')).toBe(true);
    expect(text.endsWith(`${TIMINGS}data: [DONE]\n\n`)).toBe(true);
    expect(text.length - head.length - 1).toBe(TAIL_BYTES);
  });

  it("reads on past a character split between two chunks", () => {
    const all = bytes(`data: {"text":"é"}\n\n${TIMINGS}`);
    const cut = all.indexOf(0xc3) + 1; // inside the two bytes of "é"
    const text = meteredText(all.subarray(0, cut), [all.subarray(0, cut), all.subarray(cut)], 2);
    expect(text).toContain(TIMINGS);
  });
});

describe("edges", () => {
  it("gives a whole answer of up to twice TAIL_BYTES as it is, a longer one's start and end", () => {
    expect(edges(bytes('{"a":1}'))).toBe('{"a":1}');
    const long = `{"usage":{"prompt_tokens":3},"data":"${"y".repeat(3 * TAIL_BYTES)}",${TIMINGS}}`;
    const text = edges(bytes(long));
    expect(text.startsWith('{"usage":{"prompt_tokens":3}')).toBe(true);
    expect(text.endsWith(`${TIMINGS}}`)).toBe(true);
    expect(text.length).toBe(2 * TAIL_BYTES + 1);
  });
});

import { describe, expect, it } from "vitest";
import { sseSplitter } from "../../src/http/sse.ts";

// SSE bytes split into whole events as they complete, whatever the chunks' edges.

describe("sseSplitter", () => {
  it("hands on each event once its blank line came, across chunks and a character cut between them", () => {
    const split = sseSplitter();
    const bytes = new TextEncoder().encode('data: {"a":"é"}\n\ndata: 2\n\nevent: x\ndata: 3');
    const cut = bytes.indexOf(0xc3) + 1; // inside "é"
    expect(split.push(bytes.slice(0, cut))).toEqual([]);
    expect(split.push(bytes.slice(cut))).toEqual(['data: {"a":"é"}', "data: 2"]);
    expect(split.rest()).toBe("event: x\ndata: 3");
    expect(split.rest()).toBe("");
  });
});

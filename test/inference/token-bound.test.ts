import { describe, expect, it } from "vitest";
import { boundTokens, tokenFieldAdded } from "../../src/inference/bounds.ts";
import { withLeadingField } from "../../src/http/body.ts";

// The token ceiling as a body gets it: a body that asks for no limit has one added, which is
// spliced into its bytes as they came rather than the body written again (bounds.test.ts drives
// the ceiling through llama-server).

const bytes = (value: unknown) => new TextEncoder().encode(JSON.stringify(value)) as Uint8Array<ArrayBuffer>;

describe("the token ceiling", () => {
  it.each([
    ["chat/completions", { model: "m", messages: [] }, "max_tokens"],
    ["completions", { model: "m", prompt: "p" }, "max_tokens"],
    ["responses", { model: "m", input: "i" }, "max_output_tokens"],
  ] as const)("%s without a limit: the ceiling added, the same as spliced into its bytes", (endpoint, body, field) => {
    expect(tokenFieldAdded(endpoint, body)).toBe(field);
    const bounded = boundTokens(endpoint, body, 64);
    expect(bounded).toEqual({ ...body, [field]: 64 });
    expect(JSON.parse(new TextDecoder().decode(withLeadingField(bytes(body), field, 64)))).toEqual(bounded);
  });

  it("adds nothing where a limit is asked for (lowered, if need be, on a copy) or the endpoint has none", () => {
    expect(tokenFieldAdded("chat/completions", { messages: [], max_completion_tokens: 5 })).toBeUndefined();
    expect(tokenFieldAdded("chat/completions", { messages: [], n_predict: -1 })).toBeUndefined();
    expect(boundTokens("chat/completions", { n_predict: -1 }, 64)).toEqual({ n_predict: 64 });
    const asked = { max_tokens: 3 };
    expect(boundTokens("chat/completions", asked, 64)).toBe(asked);
    expect(tokenFieldAdded("embeddings", { input: "x" })).toBeUndefined();
  });
});

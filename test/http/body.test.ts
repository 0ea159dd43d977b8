import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { readBody, withLeadingField } from "../../src/http/body.ts";

// A streamed body is read up to its limit and no further (413). Its deadline (a body that stops
// arriving) is the runtime's, for every body: test/e2e/body-deadline.test.ts.

const streamed = (chunks: string[]) =>
  new Request("http://x/", {
    method: "POST",
    body: new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
        controller.close();
      },
    }),
    duplex: "half",
  } as RequestInit);

describe("readBody", () => {
  it("reads a streamed body whole, and refuses one over the size limit with 413", async () => {
    expect(new TextDecoder().decode(await readBody(streamed(["{", "}"]), 1024))).toBe("{}");
    const error = await readBody(streamed(["x".repeat(600), "x".repeat(600)]), 1024).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HttpError);
    expect([(error as HttpError).status, (error as HttpError).code]).toEqual([413, "body_too_large"]);
  });
});

describe("a field spliced into a body as it came", () => {
  const bytes = (text: string) => new TextEncoder().encode(text) as Uint8Array<ArrayBuffer>;
  const text = (b: Uint8Array) => new TextDecoder().decode(b);

  it("comes first, the body after it byte for byte", () => {
    expect(text(withLeadingField(bytes(' \n{"model":"m",  "messages":[]}'), "max_tokens", 64))).toBe('{"max_tokens":64,"model":"m",  "messages":[]}');
  });

  it("makes an empty object one field, and leaves what is not an object as it came", () => {
    expect(JSON.parse(text(withLeadingField(bytes("{ }"), "n", 1)))).toEqual({ n: 1 });
    expect(text(withLeadingField(bytes("[1]"), "n", 1))).toBe("[1]");
  });

  it("keeps the body's own characters whole, and refuses a field name that is not ASCII (ours are)", () => {
    expect(JSON.parse(text(withLeadingField(bytes('{"text":"été ✓"}'), "id_slot", 2)))).toEqual({ id_slot: 2, text: "été ✓" });
    expect(() => withLeadingField(bytes("{}"), "été", 1)).toThrow(/not ASCII/);
  });
});

import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { readBody } from "../../src/http/body.ts";

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

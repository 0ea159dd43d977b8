import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { readBody } from "../../src/http/body.ts";

// A trickled body cannot hold a request forever: past its time limit it is refused (408).

const trickle = (chunks: string[], thenHang: boolean) =>
  new Request("http://x/", {
    method: "POST",
    body: new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
        if (!thenHang) controller.close();
      },
    }),
    duplex: "half",
  } as RequestInit);

describe("readBody", () => {
  it("refuses a body that stops arriving with 408 after its time limit", async () => {
    const error = await readBody(trickle(['{"model":'], true), 1024, 100).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HttpError);
    expect([(error as HttpError).status, (error as HttpError).code]).toEqual([408, "body_timeout"]);
  });

  it("reads a body that arrives in time, and still refuses one over the size limit", async () => {
    expect(new TextDecoder().decode(await readBody(trickle(["{", "}"], false), 1024, 1000))).toBe("{}");
    const error = await readBody(trickle(["x".repeat(600), "x".repeat(600)], false), 1024, 1000).catch((e: unknown) => e);
    expect((error as HttpError).status).toBe(413);
  });
});

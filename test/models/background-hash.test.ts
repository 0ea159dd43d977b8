import { createHash, randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { backgroundHash } from "../../src/models/store/background-hash.ts";

// The hashing thread: the digest of hashing in place, whole buffers taken over rather than
// copied, and a chunk that views part of a larger buffer copied (the rest of it is not ours).

describe("the background hash", () => {
  it("hashes chunks in order, taking over whole buffers and copying partial views", async () => {
    const whole = [3 << 20, 100, 9 << 20].map((size) => new Uint8Array(randomBytes(size)));
    const larger = new Uint8Array(randomBytes(1024));
    const partial = larger.subarray(10, 20);
    const expected = createHash("sha256");
    for (const chunk of [...whole, partial]) expected.update(chunk);
    const hash = backgroundHash();
    for (const chunk of whole) await hash.update([chunk]);
    await hash.update([partial]);
    expect(await hash.digest()).toBe(`sha256:${expected.digest("hex")}`);
    expect(whole.map((chunk) => chunk.byteLength)).toEqual([0, 0, 0]);
    expect(partial.byteLength).toBe(10);
  });

  it("hashes nothing to the empty digest", async () => {
    expect(await backgroundHash().digest()).toBe(`sha256:${createHash("sha256").digest("hex")}`);
  });
});

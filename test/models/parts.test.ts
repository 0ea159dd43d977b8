import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createModelStore } from "../../src/models/index.ts";
import { missingBytes, readProgress, splitBlob, withPrefix, writeProgress, writtenPrefix, type Part } from "../../src/models/store/parts.ts";
import { rangeAnswer, rangeHeader } from "../../src/models/store/source.ts";

// How a blob is split into ranged parts, what its record says after a crash, and what a ranged answer may hold.

const MiB = 1 << 20;
const sizes = (parts: Part[] | undefined) => parts?.map((p) => p.end - p.start);

describe("splitBlob", () => {
  it.each([
    // [size, streams, minBytes, part sizes]
    [100 * MiB, 1, 16 * MiB, undefined],
    [31 * MiB, 8, 16 * MiB, undefined],
    [32 * MiB, 8, 16 * MiB, [16 * MiB, 16 * MiB]],
    [40 * MiB, 8, 16 * MiB, [16 * MiB, 16 * MiB, 8 * MiB]],
    [1024 * MiB, 8, 16 * MiB, Array(32).fill(32 * MiB)],
    [64 * 1024 * MiB, 8, 16 * MiB, Array(256).fill(256 * MiB)],
    [6 * MiB, 4, MiB / 4, Array(16).fill((6 * MiB) / 16)],
  ])("%d bytes, %d streams, parts of %d at least", (size, streams, minBytes, expected) => {
    const parts = splitBlob(size, { streams, minBytes });
    expect(sizes(parts)).toEqual(expected);
    if (parts) expect(parts.at(-1)!.end).toBe(size);
  });
});

describe("progress of parts", () => {
  const parts = () => splitBlob(40 * MiB, { streams: 8, minBytes: 16 * MiB })!;

  it("reads a one-stream partial file as parts, and the written prefix back", () => {
    const resumed = withPrefix(parts(), 20 * MiB);
    expect(resumed.map((p) => p.done)).toEqual([16 * MiB, 4 * MiB, 0]);
    expect(writtenPrefix(resumed)).toBe(20 * MiB);
    expect(missingBytes(resumed)).toBe(20 * MiB);
  });

  it("counts only the prefix before the first unfinished part as written", () => {
    const [a, b, c] = parts();
    expect(writtenPrefix([{ ...a!, done: 5 }, { ...b!, done: 16 * MiB }, { ...c!, done: 8 * MiB }])).toBe(5);
    expect(writtenPrefix([{ ...a!, done: 16 * MiB }, { ...b!, done: 16 * MiB }, { ...c!, done: 8 * MiB }])).toBe(40 * MiB);
  });

  let dir: string | undefined;
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("keeps a record only for the size it was written for, and only a whole tiling", async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-parts-"));
    const path = join(dir, "x.parts");
    expect(await readProgress(path, 40 * MiB)).toBeUndefined();
    const written = withPrefix(parts(), 17 * MiB);
    await writeProgress(path, 40 * MiB, written);
    expect(await readProgress(path, 40 * MiB)).toEqual(written);
    expect(await readProgress(path, 41 * MiB)).toBeUndefined();
    for (const bad of ["{", '{"size":10,"parts":[[0,5,0],[6,10,0]]}', '{"size":10,"parts":[[0,10,11]]}', '{"size":10,"parts":[]}']) {
      await writeFile(path, bad);
      expect(await readProgress(path, 10), bad).toBeUndefined();
    }
  });

  it("tells the free-space check what a parted partial file still lacks", async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-parts-"));
    const store = createModelStore(dir);
    const digest = `sha256:${"c".repeat(64)}`;
    await mkdir(store.layout.blobsDir, { recursive: true });
    await writeFile(store.layout.incompleteBlob(digest), new Uint8Array(40 * MiB));
    await writeProgress(store.layout.blobProgress(digest), 40 * MiB, withPrefix(parts(), 17 * MiB));
    expect(await store.bytesMissing([{ digest, size: 40 * MiB }])).toBe(23 * MiB);
    await writeFile(store.layout.blobProgress(digest), "not a record");
    expect(await store.bytesMissing([{ digest, size: 40 * MiB }])).toBe(40 * MiB);
  });
});

describe("ranged answers", () => {
  const answer = (status: number, contentRange?: string) =>
    new Response("x", { status, headers: contentRange ? { "content-range": contentRange } : {} });

  it.each([
    [{ start: 0 }, {}],
    [{ start: 5 }, { range: "bytes=5-" }],
    [{ start: 0, end: 10 }, { range: "bytes=0-9" }],
  ])("asks for %j with %j", (range, header) => {
    expect(rangeHeader(range)).toEqual(header);
  });

  it("trusts a 206 only where it says it starts and ends, and reads a 200 as the whole blob", () => {
    expect(rangeAnswer(answer(206, "bytes 10-19/100"), { start: 10, end: 20 })).toEqual({ start: 10, ranged: true });
    expect(rangeAnswer(answer(206, "bytes 10-99/100"), { start: 10 })).toEqual({ start: 10, ranged: true });
    expect(rangeAnswer(answer(200), { start: 10, end: 20 })).toEqual({ start: 0, ranged: false });
    expect(() => rangeAnswer(answer(206, "bytes 0-19/100"), { start: 10, end: 20 })).toThrow(/bytes=10-19/);
    expect(() => rangeAnswer(answer(206, "bytes 10-15/100"), { start: 10, end: 20 })).toThrow(/bytes 10-15/);
    expect(() => rangeAnswer(answer(206), { start: 10 })).toThrow(/no Content-Range/);
  });
});

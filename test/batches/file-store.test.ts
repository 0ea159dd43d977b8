import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createFileStore } from "../../src/batches/files.ts";

// The file store on a real folder: what an upload writes before it is a file, and what is left
// when it is not kept.

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-store-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function* chunks(...texts: string[]): AsyncGenerator<Uint8Array> {
  for (const text of texts) yield new TextEncoder().encode(text);
}

async function* failing(): AsyncGenerator<Uint8Array> {
  yield new TextEncoder().encode("half");
  throw new Error("cut");
}

describe("the file store", () => {
  it("removes what a previous run left half written before it receives", async () => {
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "upload-0123.part"), "left by a crash");
    const files = createFileStore(dir);
    const incoming = await files.receive(chunks("a"));
    expect(await readdir(dir)).toEqual([incoming.path.slice(dir.length + 1)]);
  });

  it("receives into a temporary file that is no file until adopted; a failed receive leaves nothing", async () => {
    const files = createFileStore(dir);
    await expect(files.receive(failing())).rejects.toThrow("cut");
    expect(await readdir(dir)).toEqual([]);
    const incoming = await files.receive(chunks('{"a":1}\n', '{"b":2}\n'));
    expect(incoming.bytes).toBe(16);
    expect(await files.list()).toEqual([]);
    const file = await files.adopt(incoming.path, { filename: "x.jsonl", purpose: "batch", owner: "alice" });
    expect((await files.list()).map((f) => [f.id, f.bytes, f.owner])).toEqual([[file.id, 16, "alice"]]);
    expect(await new Response(await files.stream(file.id)).text()).toBe('{"a":1}\n{"b":2}\n');
    await files.discard(await files.receive(chunks("dropped")));
    expect((await readdir(dir)).filter((n) => n.endsWith(".part"))).toEqual([]);
  });
});

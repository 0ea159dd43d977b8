import { mkdtemp, readdir, rename, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createSlotFolder, keyHash, type CacheKey } from "../../src/slot-cache/folder.ts";

// The folder of saved slot caches on a real disk: entries handed back only when sound, kept to a
// byte budget with the least recently used going first, unfinished saves cleaned up.

let dir: string;
beforeEach(async () => void (dir = await mkdtemp(join(tmpdir(), "llamadock-slot-folder-"))));
afterEach(async () => rm(dir, { recursive: true, force: true }));

const key = (model: string) => ({ engine: "v", model, contextSize: 4096, parallel: 1, flags: [] });
/** What llama-server would do: write the named file. */
async function saved(folder: ReturnType<typeof createSlotFolder>, model: string, bytes: number) {
  const file = folder.saving(key(model), 0);
  await writeFile(join(dir, file), new Uint8Array(bytes).fill(model.charCodeAt(0)));
  await folder.commit(file, key(model), 0, bytes / 10);
}
const names = async () => (await readdir(dir)).filter((n) => n.endsWith(".bin")).sort();

describe("slot folder", () => {
  it("hands back an entry for its key only, and keeps to its budget, least recently used first", async () => {
    const folder = createSlotFolder(dir, 2500);
    await saved(folder, "a", 1000);
    await new Promise((resolve) => setTimeout(resolve, 20));
    await saved(folder, "b", 1000);
    expect(await folder.checkout(key("a"), 0)).toBe(`${keyHash(key("a"))}-0.bin`);
    expect(await folder.checkout(key("a"), 1)).toBeUndefined();
    expect(await folder.checkout({ ...key("a"), contextSize: 2048 }, 0)).toBeUndefined();
    // a was used after b was saved: b is the least recently used when c needs room.
    await new Promise((resolve) => setTimeout(resolve, 20));
    await saved(folder, "c", 1000);
    expect(await names()).toEqual([`${keyHash(key("a"))}-0.bin`, `${keyHash(key("c"))}-0.bin`].sort());
  });

  it("a save larger than the whole budget is not kept, and pushes out nothing", async () => {
    const folder = createSlotFolder(dir, 2500);
    await saved(folder, "a", 1000);
    await saved(folder, "b", 1000);
    const file = folder.saving(key("c"), 0);
    await writeFile(join(dir, file), new Uint8Array(3000));
    expect(await folder.commit(file, key("c"), 0, 300)).toBe(false);
    expect(await names()).toEqual([`${keyHash(key("a"))}-0.bin`, `${keyHash(key("b"))}-0.bin`].sort());
    expect((await readdir(dir)).filter((n) => n.endsWith(".part"))).toEqual([]);
  });

  it("counts the saves being written: an entry goes for the room one of them takes", async () => {
    const folder = createSlotFolder(dir, 2500);
    await saved(folder, "a", 1000);
    await new Promise((resolve) => setTimeout(resolve, 20));
    // b's save is being written (llama-server has not finished) while c's is committed.
    const writing = folder.saving(key("b"), 0);
    await writeFile(join(dir, writing), new Uint8Array(1000));
    await saved(folder, "c", 1000);
    expect(await names()).toEqual([`${keyHash(key("c"))}-0.bin`]);
    expect(await folder.commit(writing, key("b"), 0, 100)).toBe(true);
    expect(await names()).toEqual([`${keyHash(key("b"))}-0.bin`, `${keyHash(key("c"))}-0.bin`].sort());
  });

  it("forgets a deleted model's entries (every setting it was saved under), and only those", async () => {
    const folder = createSlotFolder(dir, 1 << 20);
    await saved(folder, "a", 1000);
    await saved(folder, "b", 1000);
    const other = { ...key("a"), contextSize: 2048 };
    const file = folder.saving(other, 1);
    await writeFile(join(dir, file), new Uint8Array(500));
    await folder.commit(file, other, 1, 50);
    await folder.forget("a");
    expect(await names()).toEqual([`${keyHash(key("b"))}-0.bin`]);
    expect((await readdir(dir)).filter((n) => n.endsWith(".json"))).toEqual([`${keyHash(key("b"))}-0.json`]);
  });

  it("removes an entry whose file changed size or bytes, or whose metadata names another key", async () => {
    const folder = createSlotFolder(dir, 1 << 20);
    await saved(folder, "a", 1000);
    const file = join(dir, `${keyHash(key("a"))}-0.bin`);
    await writeFile(file, new Uint8Array(1000).fill(1));
    expect(await folder.checkout(key("a"), 0)).toBeUndefined();
    expect(await names()).toEqual([]);
    await saved(folder, "b", 1000);
    // b's entry under a's name: its metadata says b.
    for (const ext of [".bin", ".json"]) {
      await rename(join(dir, `${keyHash(key("b"))}-0${ext}`), join(dir, `${keyHash(key("a"))}-0${ext}`));
    }
    expect(await folder.checkout(key("a"), 0)).toBeUndefined();
    expect(await readdir(dir)).toEqual([]);
  });

  it("finds a parked entry of a key by its name, from a folder made afresh (a restart, another process), and no other key's or slot's", async () => {
    const first = createSlotFolder(dir, 1 << 20);
    const park = async (k: CacheKey, entry: `p${string}`) => {
      const file = first.saving(k, entry);
      await writeFile(join(dir, file), new Uint8Array(100));
      await first.commit(file, k, entry, 10);
    };
    await park(key("a"), "p01");
    await park(key("a"), "p02");
    await park({ ...key("a"), flags: ["--cache-type-k", "q8_0"] }, "p03");
    await park(key("b"), "p04");
    await saved(first, "a", 100);
    // A save still being written (no metadata yet) is not an entry.
    await writeFile(join(dir, `${keyHash(key("a"))}-p05.bin`), new Uint8Array(100));
    const again = createSlotFolder(dir, 1 << 20);
    const found = (k: CacheKey) => ["p01", "p02", "p03", "p04", "p05"].filter((entry) => again.isParked(k, entry as `p${string}`));
    expect(found(key("a"))).toEqual(["p01", "p02"]);
    expect(found({ ...key("a"), engine: "w" })).toEqual([]);
    expect(await again.checkout(key("a"), "p01")).toBe(`${keyHash(key("a"))}-p01.bin`);
    // Parked after this folder was made (by the first, as another process would): found as well.
    await park(key("b"), "p06");
    expect(again.isParked(key("b"), "p06")).toBe(true);
    // Restored and removed: no longer found.
    await again.discard(key("a"), "p01");
    expect(found(key("a"))).toEqual(["p02"]);
  });

  it("removes saves left unfinished long ago, not one being written", async () => {
    const folder = createSlotFolder(dir, 1 << 20);
    await folder.prune();
    const old = join(dir, "x-0.deadbeef.part");
    await writeFile(old, "partial");
    const hourAgo = new Date(Date.now() - 3_600_000);
    await utimes(old, hourAgo, hourAgo);
    const writing = folder.saving(key("a"), 0);
    await writeFile(join(dir, writing), "being written");
    await utimes(join(dir, writing), hourAgo, hourAgo);
    await folder.prune();
    expect(await readdir(dir)).toEqual([writing]);
  });
});

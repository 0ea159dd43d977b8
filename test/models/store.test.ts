import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { afterEach, describe, expect, it } from "vitest";
import { commandLine, projectRoot, runtimeBinary } from "../support/server-process.ts";
import { until } from "../support/until.ts";
import { createModelStore, type ModelStore } from "../../src/models/index.ts";
import type { BlobSource } from "../../src/models/store/blobs.ts";

// The store on its own: blobs verified before they are named, the index replaced whole, and
// concurrent writers, in one process or in several on one folder, that do not lose each other's
// changes; a blob another process serves is kept through a delete until it is no longer served.

let root: string;
afterEach(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

const digestOf = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
const source = (bytes: Uint8Array): BlobSource => async (range) => ({
  body: new Blob([bytes.subarray(range.start, range.end) as Uint8Array<ArrayBuffer>]).stream() as ReadableStream<Uint8Array>,
  start: range.start,
  ranged: range.start > 0 || range.end !== undefined,
});

async function addModel(store: ModelStore, tag: string, weights: Uint8Array) {
  const digest = digestOf(weights);
  await store.downloadBlob({ digest, size: weights.byteLength, source: source(weights), signal: new AbortController().signal });
  return store.add({
    manifest: new TextEncoder().encode(JSON.stringify({ tag, digest })),
    tag,
    created: 1,
    config: { format: "gguf" },
    files: { gguf: [digest] },
  });
}

describe("the model store", () => {
  it("keeps every model when many are added and deleted at once", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const store = createModelStore(root);
    const weights = Array.from({ length: 12 }, (_, i) => new TextEncoder().encode(`weights ${i}`));
    const added = await Promise.all(weights.map((w, i) => addModel(store, `ai/m${i}:latest`, w)));
    await Promise.all([
      ...added.slice(0, 6).map((m) => store.remove(m.id, undefined)),
      ...added.slice(6).map((m) => store.addTag(m.id, `${m.tags[0]!.replace(":latest", "")}:extra`)),
    ]);
    const listed = await store.list();
    expect(listed.map((m) => m.tags).sort()).toEqual(added.slice(6).map((m) => [m.tags[0], m.tags[0]!.replace(":latest", ":extra")]).sort());
    const blobs = await readdir(store.layout.blobsDir);
    expect(blobs.sort()).toEqual(added.slice(6).map((m) => m.ggufPath.split("/").at(-1)).sort());
    expect(JSON.parse(await readFile(store.layout.indexFile, "utf8")).models).toHaveLength(6);
  });

  it("keeps a blob that a running pull has pinned when another model using it is deleted", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const store = createModelStore(root);
    const shared = new TextEncoder().encode("shared weights");
    const model = await addModel(store, "ai/a:latest", shared);
    const unpin = await store.pin([digestOf(shared)]);
    await store.remove(model.id, undefined);
    expect(await store.hasBlob(digestOf(shared))).toBe(true);
    unpin();
  });

  it("refuses to record a model whose blob is missing, and refuses a blob that does not match its digest", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const store = createModelStore(root);
    const absent = digestOf(new TextEncoder().encode("absent"));
    await expect(
      store.add({ manifest: new Uint8Array([1]), tag: "ai/x:latest", created: 1, config: {}, files: { gguf: [absent] } }),
    ).rejects.toThrow(/missing/);
    const bytes = new TextEncoder().encode("real");
    await expect(
      store.downloadBlob({ digest: absent, size: bytes.byteLength, source: source(bytes), signal: new AbortController().signal }),
    ).rejects.toThrow(/does not match/);
    expect(await store.list()).toEqual([]);
    expect(await readdir(store.layout.blobsDir)).toEqual([]);
  });

  it("resumes a partial blob from its .incomplete bytes", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const store = createModelStore(root);
    const bytes = new TextEncoder().encode("0123456789".repeat(100));
    const digest = digestOf(bytes);
    await mkdir(store.layout.blobsDir, { recursive: true });
    await writeFile(store.layout.incompleteBlob(digest), bytes.subarray(0, 300));
    const offsets: number[] = [];
    await store.downloadBlob({
      digest,
      size: bytes.byteLength,
      source: async (range, signal) => {
        offsets.push(range.start);
        return source(bytes)(range, signal);
      },
      signal: new AbortController().signal,
    });
    expect(offsets).toEqual([300]);
    expect(new Uint8Array(await readFile(store.layout.blob(digest)))).toEqual(bytes);
  });

  it("resolves ids, short ids, tags, and a bare repository name", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const store = createModelStore(root);
    const model = await addModel(store, "myorg/smollm2:v1", new TextEncoder().encode("w"));
    const hex = model.id.slice(7);
    for (const name of [model.id, hex, hex.slice(0, 12), "myorg/smollm2:v1", "docker.io/myorg/smollm2:v1", "smollm2", "smollm2:v1", "SmolLM2"]) {
      expect((await store.resolve(name))?.id, name).toBe(model.id);
    }
    for (const name of ["myorg/smollm2", "smollm2:v2", "other", hex.slice(0, 11)]) {
      expect(await store.resolve(name), name).toBeUndefined();
    }
  });

  it("answers a name asked again from memory, until the index changes", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const store = createModelStore(root);
    expect(await store.resolve("ai/later")).toBeUndefined();
    const model = await addModel(store, "ai/later:latest", new TextEncoder().encode("later"));
    const found = await store.resolve("ai/later");
    expect(found?.id).toBe(model.id);
    expect(await store.resolve("ai/later")).toBe(found);
    // Shared by every request that names it: nobody may change it for the others.
    expect(() => (found!.tags as string[]).push("x")).toThrow();
    await store.addTag(model.id, "ai/other:latest");
    expect((await store.resolve("ai/later"))?.tags).toEqual(["ai/later:latest", "ai/other:latest"]);
    await store.remove(model.id, undefined);
    expect(await store.resolve("ai/later")).toBeUndefined();
  });

  it("serves from a recent look at the index: another process's delete is seen once it is older, its addition at once", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const store = createModelStore(root);
    const model = await addModel(store, "ai/kept:latest", new TextEncoder().encode("kept"));
    const recent = { recentMs: 1_000 };
    expect((await store.resolve("ai/kept", recent))?.id).toBe(model.id);
    // Another process replaces the file (as every writer does: a temporary file, then a rename).
    const replace = async (models: unknown[]) => {
      await writeFile(`${store.layout.indexFile}.other`, JSON.stringify({ version: 1, models }));
      await rename(`${store.layout.indexFile}.other`, store.layout.indexFile);
    };
    const [entry] = JSON.parse(await readFile(store.layout.indexFile, "utf8")).models;
    await replace([]);
    await new Promise((resolve) => setImmediate(resolve)); // a new event-loop turn
    expect((await store.resolve("ai/kept", recent))?.id).toBe(model.id); // looked at under a second ago
    expect(await store.resolve("ai/kept")).toBeUndefined(); // the model API looks each turn
    await replace([entry, { ...entry, id: `sha256:${"1".repeat(64)}`, tags: ["ai/added:latest"] }]);
    await new Promise((resolve) => setImmediate(resolve));
    expect((await store.resolve("ai/added", recent))?.tags).toEqual(["ai/added:latest"]); // a miss looks again
    await replace([]);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    expect(await store.resolve("ai/added", recent)).toBeUndefined(); // the look is older than a second
  });

  it("validates a digest before it becomes a path", () => {
    const store = createModelStore("/nonexistent");
    expect(() => store.layout.blob("sha256:../../etc/passwd")).toThrow(/not a sha256 digest/);
  });
});

describe("a store shared by several processes", () => {
  it("keeps every writer's models when separate processes (Bun, Node) add to it at once", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const writers = (["bun", "node", "bun", "node"] as const).map((runtime, i) => {
      const args = commandLine({ runtime, entry: "test/support/store-writer.ts", args: [root, `w${i}`, "8"] });
      const child = spawn(runtimeBinary(runtime), args, { cwd: projectRoot, stdio: ["ignore", "inherit", "inherit"] });
      return once(child, "close").then(([code]) => code);
    });
    expect(await Promise.all(writers)).toEqual([0, 0, 0, 0]);
    const store = createModelStore(root);
    const tags = (await store.list()).flatMap((m) => m.tags).sort();
    expect(tags).toEqual([0, 1, 2, 3].flatMap((w) => Array.from({ length: 8 }, (_, i) => `w${w}/m${i}:latest`)).sort());
    // 32 weights and the one shared projector; no lock, lease or partial file is left.
    const names = await readdir(store.layout.blobsDir);
    expect(names.filter((n) => !/^[0-9a-f]{64}$/.test(n))).toEqual([]);
    expect(names).toHaveLength(33);
    expect(await readdir(store.layout.leasesDir).catch(() => [])).toEqual([]);
    expect((await readdir(root)).filter((n) => n !== "leases").sort()).toEqual(["blobs", "manifests", "models.json"]);
  });

  it("keeps a blob that another store on the folder serves through a delete, and removes it once it is not served", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const serving = createModelStore(root);
    const deleting = createModelStore(root);
    const model = await addModel(deleting, "ai/a:latest", new TextEncoder().encode("served weights"));
    const served = await serving.serve([model.ggufPath, "/elsewhere/not-a-blob"]);
    await deleting.remove(model.id, undefined);
    expect(await serving.list()).toEqual([]);
    expect((await readdir(serving.layout.blobsDir)).sort()).toEqual([model.ggufPath.split("/").at(-1), `${model.ggufPath.split("/").at(-1)}.orphan`]);
    served();
    await until(async () => (await readdir(serving.layout.blobsDir)).length === 0, "the blob to go once it is not served");
  });

  it("removes at start what a process gone left marked, and then refuses to serve the file", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-store-"));
    const store = createModelStore(root);
    const model = await addModel(store, "ai/a:latest", new TextEncoder().encode("weights"));
    const other = createModelStore(root);
    await other.serve([model.ggufPath]);
    await store.remove(model.id, undefined);
    expect(await readdir(store.layout.blobsDir)).toHaveLength(2); // the blob and its mark
    // The server that held it is killed: its lease stays behind, naming a pid that no longer runs.
    const [lease] = await readdir(store.layout.leasesDir);
    const record = JSON.parse(await readFile(join(store.layout.leasesDir, lease!), "utf8"));
    await other.close();
    await writeFile(join(store.layout.leasesDir, lease!), JSON.stringify({ ...record, pid: await exitedPid() }));
    await createModelStore(root).collectOrphans();
    expect(await readdir(store.layout.blobsDir)).toEqual([]);
    expect(await readdir(store.layout.leasesDir)).toEqual([]);
    await expect(store.serve([model.ggufPath])).rejects.toThrow(/is gone: the model was deleted, or the file removed/);
  });
});

/** A pid that has just exited on this machine. */
async function exitedPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
  await once(child, "close");
  return child.pid!;
}

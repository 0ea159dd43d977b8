import { readdir, stat, utimes } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { modelArtifact, startHostileRegistry, type HostileRegistry } from "../support/hostile-registry.ts";
import { pushModel, sha256, startRegistry, type PushedModel, type Registry } from "../support/registry.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";
import { call, modelApi, pull, type ModelApi } from "./helpers.ts";

// Purge and what it reclaims, through the model routes over a store in a temporary folder: the
// files failed pulls leave (complete blobs no model names, incomplete downloads) are counted as
// unused and removed, with the bytes freed reported; models are kept unless all are asked for,
// and what a running pull holds is never taken.

let registry: Registry;
let hostile: HostileRegistry;
let tiny: PushedModel;
const junk = new Uint8Array(300_000).fill(7); // downloads whole, then fails: not a GGUF file
const stalled = [tinyLlamaGguf({ seed: 41 }), tinyLlamaGguf({ seed: 42 })];
let api: ModelApi | undefined;

beforeAll(async () => {
  [registry, hostile] = await Promise.all([startRegistry(), startHostileRegistry()]);
  tiny = await pushModel(registry, "ai/tiny", "latest", tinyLlamaGguf());
  await pushModel(registry, "ai/junk", "latest", junk);
  for (const [i, weights] of stalled.entries()) hostile.add(modelArtifact(`ai/stalled${i}`, "latest", weights));
  // Each stalled blob sends its first 100 kB, then nothing.
  hostile.misbehaviour.blobs = Object.fromEntries(stalled.map((w) => [sha256(w), { stallAfter: 100_000 }]));
});
afterAll(async () => {
  await Promise.all([registry?.stop(), hostile?.stop()]);
});
afterEach(async () => {
  await api?.dispose();
  api = undefined;
});

const purge = async (query = "") => call(api!.handler, "DELETE", `/models/purge${query}`);

const blobFiles = async () => (await readdir(api!.store.layout.blobsDir)).sort();

/** A store with ai/tiny, the leftovers of a pull of a model that is no GGUF, and two stalled downloads. */
async function storeWithLeftovers() {
  api = await modelApi({ defaultRegistry: registry.host, stallTimeoutMs: 300 });
  expect((await pull(api.handler, { from: "ai/tiny" })).lines.at(-1)).toMatchObject({ type: "success" });
  const failed = await pull(api.handler, { from: "ai/junk" });
  expect(failed.lines.at(-1)).toMatchObject({ type: "error" });
  for (const i of [0, 1]) expect((await pull(api.handler, { from: `${hostile.host}/ai/stalled${i}` })).lines.at(-1)).toMatchObject({ type: "error" });
  const incomplete = stalled.map((w) => api!.store.layout.incompleteBlob(sha256(w)));
  for (const path of incomplete) expect((await stat(path)).size).toBe(100_000);
  // One left two hours ago, one just now.
  const twoHoursAgo = new Date(Date.now() - 2 * 3600_000);
  await utimes(incomplete[0]!, twoHoursAgo, twoHoursAgo);
  const tinyConfig = JSON.parse(new TextDecoder().decode(tiny.manifest)).config.digest as string;
  const junkConfig = (await blobFiles()).filter((name) => /^[0-9a-f]{64}$/.test(name) && ![sha256(junk), tiny.ggufDigest, tinyConfig].includes(`sha256:${name}`));
  return { incomplete, junkConfigs: junkConfig };
}

describe("DELETE /models/purge", () => {
  it("keeps models and fresh downloads with ?unused=true, removes what failed pulls left, and reports the bytes freed", async () => {
    const { incomplete, junkConfigs } = await storeWithLeftovers();
    const junkBlob = api!.store.layout.blob(sha256(junk));
    // The failed pull's config blob (kept by the pull, named by no model).
    expect(junkConfigs).toHaveLength(1);
    const junkConfigSize = (await stat(join(api!.store.layout.blobsDir, junkConfigs[0]!))).size;
    const unusedBefore = await api!.store.unused(0);
    // The junk weights and its config; both incomplete downloads.
    expect(unusedBefore).toEqual({ files: 4, bytes: junk.byteLength + junkConfigSize + 200_000, incompleteBytes: 200_000 });

    const report = await purge("?unused=true&older-than=1h");
    expect(report.status).toBe(200);
    expect(report.json.deleted).toEqual([]);
    expect(report.json.incomplete_bytes).toBe(100_000);
    // Everything unused but the fresh download: the junk weights, the config of the failed pull, the old download.
    expect(report.json.freed_bytes).toBe(unusedBefore.bytes - 100_000);
    expect(report.json.removed_files).toBe(3);
    await expect(stat(junkBlob)).rejects.toThrow();
    await expect(stat(incomplete[0]!)).rejects.toThrow();
    expect((await stat(incomplete[1]!)).size).toBe(100_000);
    expect((await call(api!.handler, "GET", "/models/ai/tiny")).status).toBe(200);
    expect((await stat(api!.store.layout.blob(tiny.ggufDigest))).size).toBe(tiny.size);
    expect(await api!.store.unused(0)).toEqual({ files: 1, bytes: 100_000, incompleteBytes: 100_000 });

    const rest = await purge("?unused=true&older-than=0");
    expect(rest.json).toMatchObject({ removed_files: 1, freed_bytes: 100_000, incomplete_bytes: 100_000 });
    expect(await api!.store.unused(0)).toEqual({ files: 0, bytes: 0, incompleteBytes: 0 });
    // A pull of ai/tiny again finds its model whole.
    expect((await pull(api!.handler, { from: "ai/tiny" })).lines.at(-1)).toMatchObject({ type: "success", message: "Using cached model: ai/tiny:latest" });
  });

  it("deletes every model without a query (DMR's purge), and counts their bytes", async () => {
    await storeWithLeftovers();
    const files = await blobFiles();
    let total = 0;
    for (const name of files) total += (await stat(join(api!.store.layout.blobsDir, name))).size;
    total += (await stat(api!.store.layout.manifest((await api!.store.list())[0]!.id))).size;
    const report = await purge();
    expect(report.status).toBe(200);
    expect(report.json.deleted).toEqual([{ id: tiny.manifestDigest, tags: ["ai/tiny:latest"] }]);
    expect(report.json.freed_bytes).toBe(total);
    expect(report.json.incomplete_bytes).toBe(200_000);
    expect(await blobFiles()).toEqual([]);
    expect((await call(api!.handler, "GET", "/models")).json).toEqual([]);
  });

  it("never takes the download of a pull that is running, and takes it once that pull has ended", async () => {
    api = await modelApi({ defaultRegistry: registry.host, stallTimeoutMs: 60_000 });
    const client = new AbortController();
    const running = pull(api.handler, { from: `${hostile.host}/ai/stalled0` }, client.signal).catch(() => undefined);
    const partial = api.store.layout.incompleteBlob(sha256(stalled[0]!));
    await until(async () => (await stat(partial).then((s) => s.size, () => 0)) === 100_000, "the stalled download's first bytes");
    const past = new Date(Date.now() - 2 * 3600_000);
    await utimes(partial, past, past);
    const during = await purge();
    expect(during.json).toMatchObject({ removed_files: 0, freed_bytes: 0 });
    expect((await stat(partial)).size).toBe(100_000);
    // In process, an abandoned answer is never closed (a server would close the connection): not awaited.
    client.abort();
    void running;
    await until(async () => (await purge("?unused=true&older-than=0")).json.freed_bytes === 100_000, "the download freed once its pull ended");
    await expect(stat(partial)).rejects.toThrow();
  });

  it("answers 400 for an age it cannot read", async () => {
    api = await modelApi({ defaultRegistry: registry.host });
    for (const age of ["soon", "90", "-1h", "1w"]) {
      const answer = await purge(`?unused=true&older-than=${age}`);
      expect(answer.status, age).toBe(400);
      expect(answer.json.error).toMatchObject({ code: "invalid_age", type: "invalid_request_error" });
    }
  });
});

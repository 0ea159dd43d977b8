import { mkdtemp, readdir, readFile, rm, unlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createModelStore } from "../../src/models/index.ts";
import { readProgress } from "../../src/models/store/parts.ts";
import { NO_EARLY_STOP } from "../inference/harness.ts";
import { ask, openStream } from "../support/http.ts";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { pushModel, sha256, startRegistry, type PushedModel, type Registry } from "../support/registry.ts";
import { startReplica, type Replica } from "../support/replica.ts";
import type { RuntimeName, ServerProcess } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// Several model runners on one store, as replicas on a shared volume run: real server processes
// (Node, Bun, Deno) on one MODELS_PATH, each with its own sockets and runner folder, pulling from
// a real registry behind a throttled front, serving with real llama-server runners.

let registry: Registry;
let tiny: PushedModel;
let shaped: PushedModel;
let dir: string;
const servers: ServerProcess[] = [];
const fronts: Front[] = [];

// Large enough to come in ranged parts (4 streams, parts of 256 KiB), small enough to load at once.
const SHAPE = { embedding: 256, feedForward: 512, layers: 2, seed: 5 };
const PARTS = { PULL_PARTS: "4", PULL_PART_MIN_BYTES: String(256 << 10) };

beforeAll(async () => {
  registry = await startRegistry();
  tiny = await pushModel(registry, "ai/tiny", "latest", tinyLlamaGguf());
  shaped = await pushModel(registry, "ai/shaped", "latest", tinyLlamaGguf(SHAPE));
});
afterAll(async () => {
  await registry?.stop();
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.stop(10_000)));
  await Promise.all(fronts.splice(0).map((f) => f.stop()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function front(bytesPerSecond: number) {
  const started = await startRegistryFront(registry.url, { bytesPerSecond });
  fronts.push(started);
  return started;
}

/** One replica on the shared store (see support/replica.ts), stopped after the test. */
async function replica(name: string, runtime: RuntimeName, registryHost: string): Promise<Replica> {
  const started = await startReplica(dir, name, runtime, registryHost, PARTS);
  servers.push(started.server);
  return started;
}

const store = () => createModelStore(join(dir, "models"));
const pull = (url: string, from: string) =>
  fetch(`${url}/models/create`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ from }) }).then((r) => r.text());
const chat = (url: string, model: string, extra: object = {}) =>
  ask({ url }, "POST", "/engines/v1/chat/completions", { model, messages: [{ role: "user", content: "hi" }], max_tokens: 3, ...extra });
const listed = async (url: string) => ((await ask({ url }, "GET", "/models")).json() as { tags: string[] }[]).map((m) => m.tags);
const hex = (digest: string) => digest.slice("sha256:".length);

describe("two servers on one store", () => {
  it("pull the same model at once: it is downloaded once, stored once, listed and served by both", async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-shared-"));
    // About 7 s for the tiny model's 460 KB: the two pulls overlap whatever the machine's speed.
    const f = await front(64 << 10);
    const [a, b] = await Promise.all([replica("a", "node", f.host), replica("b", "bun", f.host)]);
    const [fromA, fromB] = await Promise.all([pull(a.url, "ai/tiny"), pull(b.url, "ai/tiny")]);
    expect(fromA).toContain("Model pulled successfully");
    expect(fromB).toContain("Model pulled successfully");

    // One GET of the weights: the second puller waited for the first and used its blob.
    expect(f.requests.filter((r) => r.startsWith("GET ") && r.includes(`/blobs/${tiny.ggufDigest}`))).toHaveLength(1);
    const blobs = store().layout.blobsDir;
    expect((await readdir(blobs)).sort()).toEqual([hex(tiny.ggufDigest), hex(tiny.configDigest)].sort());
    expect(sha256(await readFile(join(blobs, hex(tiny.ggufDigest))))).toBe(tiny.ggufDigest);
    const index = JSON.parse(await readFile(store().layout.indexFile, "utf8"));
    expect(index.models.map((m: { id: string; tags: string[] }) => [m.id, m.tags])).toEqual([[tiny.manifestDigest, ["ai/tiny:latest"]]]);

    for (const { url } of [a, b]) {
      expect(await listed(url)).toEqual([["ai/tiny:latest"]]);
      expect((await chat(url, "ai/tiny")).status).toBe(200);
    }
    // Each serves the blob from its runner, and says so in its lease.
    const leases = await readdir(store().layout.leasesDir);
    expect(leases.map((name) => Number(name.split("-")[0])).sort()).toEqual([a.server.pid, b.server.pid].sort());
    for (const name of leases) expect(JSON.parse(await readFile(join(store().layout.leasesDir, name), "utf8")).digests).toEqual([tiny.ggufDigest]);
  });

  it("let one delete a model the other is answering from: the answer completes, the other's next request is a 404, the blob goes when its runner does", async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-shared-"));
    const [a, b] = await Promise.all([replica("a", "node", registry.host), replica("b", "bun", registry.host)]);
    expect(await pull(a.url, "ai/tiny")).toContain("Model pulled successfully");
    expect(await listed(b.url)).toEqual([["ai/tiny:latest"]]);

    const tokens = 300;
    const stream = openStream({ url: b.url }, "/engines/v1/chat/completions", {
      model: "ai/tiny",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: tokens,
      stream: true,
      stream_options: { include_usage: true },
      ...NO_EARLY_STOP,
    });
    await stream.started;
    const deleted = await ask({ url: a.url }, "DELETE", "/models/ai/tiny");
    expect(deleted.status).toBe(200);
    expect(deleted.json()).toEqual([{ Untagged: "ai/tiny:latest" }, { Deleted: tiny.manifestDigest }]);
    const layout = store().layout;
    // Still served by the other: kept, and marked for removal once it is not.
    expect((await readdir(layout.blobsDir)).sort()).toEqual([hex(tiny.ggufDigest), `${hex(tiny.ggufDigest)}.orphan`]);

    const text = await stream.ended;
    expect(stream.status()).toBe(200);
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    const usage = text.split("\n\n").map((e) => e.replace(/^data: /, "")).filter((e) => e.includes('"usage"')).map((e) => JSON.parse(e).usage).find(Boolean);
    expect(usage.completion_tokens).toBe(tokens);

    const missing = await chat(b.url, "ai/tiny");
    expect(missing.status).toBe(404);
    expect(missing.json()).toEqual({ error: { message: "model not found: ai/tiny", type: "not_found_error", code: "model_not_found" } });
    expect(await listed(b.url)).toEqual([]);
    expect(await listed(a.url)).toEqual([]);

    // Its runner unloaded, the other server removes the blob it kept.
    expect((await ask({ url: b.url }, "POST", "/engines/unload", { all: true })).json()).toEqual({ unloaded_runners: 1 });
    await until(async () => (await readdir(layout.blobsDir)).length === 0, "the kept blob to be removed");
    await until(async () => (await readdir(layout.leasesDir).catch(() => [])).length === 0, "the leases to go");
  });

  it("rely on no more than Linux gives: a runner answers to its end from a blob unlinked under it", async () => {
    // What a delete would do to a server whose lease it wrongly judged stale: the runner has the
    // weights open, so the file stays readable to it until it closes them.
    dir = await mkdtemp(join(tmpdir(), "llamadock-shared-"));
    const { url } = await replica("a", "node", registry.host);
    expect(await pull(url, "ai/tiny")).toContain("Model pulled successfully");
    const stream = openStream({ url }, "/engines/v1/chat/completions", {
      model: "ai/tiny",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 200,
      stream: true,
      stream_options: { include_usage: true },
      ...NO_EARLY_STOP,
    });
    await stream.started;
    await unlink(join(store().layout.blobsDir, hex(tiny.ggufDigest)));
    const text = await stream.ended;
    const usage = text.split("\n\n").map((e) => e.replace(/^data: /, "")).filter((e) => e.includes('"usage"')).map((e) => JSON.parse(e).usage).find(Boolean);
    expect(usage.completion_tokens).toBe(200);
    expect((await chat(url, "ai/tiny")).status).toBe(200); // the loaded runner still has it
  });

  it("survive one killed in the middle of a pull that the other joined: the other completes it, and a third lists and serves it", async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-shared-"));
    // 4 streams of 256 KiB/s: the 5.8 MB take about 6 s, with a checkpoint every second.
    const f = await front(256 << 10);
    const [a, b] = await Promise.all([replica("a", "node", f.host), replica("b", "deno", f.host)]);
    const layout = store().layout;
    const recorded = async () => ((await readProgress(layout.blobProgress(shaped.ggufDigest), shaped.size)) ?? []).reduce((sum, p) => sum + p.done, 0);
    const fromA = pull(a.url, "ai/shaped").catch(() => "");
    await until(async () => (await recorded()) >= 1 << 20, "a checkpoint of 1 MiB by the first pull");
    const manifests = () => f.requests.filter((r) => r.includes("/manifests/")).length;
    const before = manifests();
    const fromB = pull(b.url, "ai/shaped");
    await until(() => manifests() > before, "the second pull to start");
    a.server.child.kill("SIGKILL");
    await a.server.exited;
    await fromA;
    const servedToA = f.blobBytes(shaped.ggufDigest);

    const text = await fromB;
    expect(text).toContain("Model pulled successfully");
    const progress = text.split("\n").filter(Boolean).map((l) => JSON.parse(l)).filter((l) => l.type === "progress");
    expect(progress.at(-1).layer.current).toBe(shaped.size);
    // It resumed from what the killed one had recorded, rather than start over.
    expect(f.blobBytes(shaped.ggufDigest) - servedToA).toBeLessThanOrEqual(shaped.size - (1 << 20));

    // Nothing of the download is left but the blob, whole (and the artifact's config).
    expect((await readdir(layout.blobsDir)).sort()).toEqual([hex(shaped.ggufDigest), hex(shaped.configDigest)].sort());
    expect(sha256(await readFile(join(layout.blobsDir, hex(shaped.ggufDigest))))).toBe(shaped.ggufDigest);
    // A third server on the store lists and serves it, and removes the killed one's lease.
    const c = await replica("c", "bun", f.host);
    await until(async () => !(await readdir(layout.leasesDir).catch(() => [])).some((n) => n.startsWith(`${a.server.pid}-`)), "the killed server's lease to go");
    expect(await listed(c.url)).toEqual([["ai/shaped:latest"]]);
    expect((await chat(c.url, "ai/shaped")).status).toBe(200);
    expect((await chat(b.url, "ai/shaped")).status).toBe(200);
  });
});

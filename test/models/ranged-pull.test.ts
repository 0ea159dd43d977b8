import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createModelStore } from "../../src/models/index.ts";
import { readProgress, missingBytes } from "../../src/models/store/parts.ts";
import { startRegistryFront, type Front, type FrontOptions } from "../support/registry-front.ts";
import { pushModel, startRegistry, type PushedModel, type Registry } from "../support/registry.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";
import { call, modelApi, pull, type ModelApi } from "./helpers.ts";

// Large blobs come in parallel ranged parts: from the real registry through a loopback front that
// counts requests and bytes, redirects to a "CDN", ignores Range, corrupts bytes or caps each
// connection's bandwidth; and a server killed with SIGKILL in the middle of a pull, whose next
// pull fetches only the bytes its parts had not recorded.

const PARTS = { streams: 4, minBytes: 256 << 10 };
// 6 MiB: 16 parts of 384 KiB for 4 streams.
const SIZE = 6 << 20;

let registry: Registry;
let big: PushedModel;
let weights: Uint8Array;
let api: ModelApi | undefined;
const fronts: Front[] = [];

/** A valid GGUF header (so the store can describe the model) padded with random bytes. */
function bigGguf(size: number): Uint8Array {
  const head = tinyLlamaGguf({ seed: 11 });
  const bytes = new Uint8Array(size);
  bytes.set(head);
  bytes.set(randomBytes(size - head.byteLength), head.byteLength);
  return bytes;
}

beforeAll(async () => {
  registry = await startRegistry();
  weights = bigGguf(SIZE);
  big = await pushModel(registry, "ai/big", "latest", weights);
});
afterAll(async () => {
  await registry?.stop();
});
afterEach(async () => {
  await api?.dispose();
  api = undefined;
  await Promise.all(fronts.splice(0).map((f) => f.stop()));
});

async function front(options: FrontOptions = {}) {
  const started = await startRegistryFront(registry.url, options);
  fronts.push(started);
  return started;
}

const weightGets = (f: Front) => f.requests.filter((r) => r.startsWith("GET ") && r.includes(`/blobs/${big.ggufDigest}`));
const sha256 = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;

async function expectStored(root: string) {
  const store = createModelStore(root);
  const model = await store.resolve("ai/big");
  expect(model?.id).toBe(big.manifestDigest);
  expect(sha256(await readFile(model!.ggufPath))).toBe(big.ggufDigest);
  // Nothing of the download is left beside the blob.
  expect((await readdir(store.layout.blobsDir)).filter((name) => /\.(incomplete|parts)$/.test(name))).toEqual([]);
}

describe("a large blob in ranged parts", () => {
  it("comes in parallel ranged requests that tile the blob, with progress to the last byte", async () => {
    // Capped so that the parts overlap in time whatever the machine's speed.
    const f = await front({ bytesPerSecond: 8 << 20 });
    api = await modelApi({ defaultRegistry: f.host, pullParts: PARTS });
    const { lines } = await pull(api.handler, { from: "ai/big" });
    expect(lines.at(-1)).toMatchObject({ type: "success" });

    const ranges = weightGets(f).map((r) => /bytes=(\d+)-(\d+)$/.exec(r)!.slice(1).map(Number));
    expect(ranges).toHaveLength(16);
    const covered = ranges.sort((a, b) => a[0]! - b[0]!).reduce((at, [start, end]) => (start === at ? end! + 1 : NaN), 0);
    expect(covered).toBe(SIZE);
    expect(f.blobGets().peak).toBe(PARTS.streams);
    expect(f.blobBytes(big.ggufDigest)).toBe(SIZE);

    const progress = lines.filter((l) => l.type === "progress").map((l) => l.layer!.current);
    expect(progress.at(-1)).toBe(SIZE);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
    await expectStored(api.root);
  });

  it("follows the registry's redirect once, then asks the CDN for the other parts straight", async () => {
    const f = await front({ redirectBlobs: true });
    api = await modelApi({ defaultRegistry: f.host, pullParts: PARTS });
    expect((await pull(api.handler, { from: "ai/big" })).lines.at(-1)).toMatchObject({ type: "success" });
    const gets = weightGets(f);
    expect(gets.filter((r) => r.startsWith("GET /v2/"))).toHaveLength(1);
    expect(gets.filter((r) => r.startsWith("GET /cdn/v2/"))).toHaveLength(16);
    await expectStored(api.root);
  });

  it("falls back to one stream from a server that ignores Range", async () => {
    const f = await front({ ignoreRange: true });
    api = await modelApi({ defaultRegistry: f.host, pullParts: PARTS });
    const { lines } = await pull(api.handler, { from: "ai/big" });
    expect(lines.at(-1)).toMatchObject({ type: "success" });
    // The first ranged request got the whole blob, and that answer was read to its end.
    expect(weightGets(f)).toHaveLength(1);
    expect(f.blobBytes(big.ggufDigest)).toBe(SIZE);
    expect(lines.filter((l) => l.type === "progress").at(-1)!.layer!.current).toBe(SIZE);
    await expectStored(api.root);
  });

  it("fails the digest check when a part is corrupted, and records no model", async () => {
    const f = await front({ corruptBlob: big.ggufDigest });
    api = await modelApi({ defaultRegistry: f.host, pullParts: PARTS });
    const { lines } = await pull(api.handler, { from: "ai/big" });
    expect(lines.at(-1)).toMatchObject({ type: "error", message: expect.stringMatching(/does not match its digest/) });
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
    // Bytes that hash wrong are not kept to resume from.
    expect(await readdir(api.store.layout.blobsDir)).toEqual([]);
  });

  it("resumes in one stream what parts left, once parts are turned off", async () => {
    const f = await front({ bytesPerSecond: 1 << 20 });
    const root = await mkdtemp(join(tmpdir(), "llamadock-models-"));
    try {
      api = await modelApi({ defaultRegistry: f.host, pullParts: PARTS, root });
      const first = await api.handler(new Request("http://model-runner/models/create", { method: "POST", body: JSON.stringify({ from: "ai/big" }) }));
      const progress = api.store.layout.blobProgress(big.ggufDigest);
      await until(async () => ((await readProgress(progress, SIZE)) ?? []).some((p) => p.done > 0), "a checkpoint");
      // The client stops reading and leaves: its pull is cancelled.
      await first.body!.cancel();
      await until(() => f.blobGets().now === 0, "the parts to stop");
      const kept = await readProgress(progress, SIZE);
      const oneStream = await modelApi({ defaultRegistry: f.host, pullParts: { streams: 1, minBytes: PARTS.minBytes }, root });
      const before = weightGets(f).length;
      expect((await pull(oneStream.handler, { from: "ai/big" })).lines.at(-1)).toMatchObject({ type: "success" });
      const resumedAt = Number(/bytes=(\d+)-$/.exec(weightGets(f)[before]!)?.[1]);
      // The written prefix is kept: the first part's bytes at least.
      expect(resumedAt).toBeGreaterThanOrEqual(kept![0]!.done);
      expect(resumedAt).toBeGreaterThan(0);
      await expectStored(root);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});

describe("a server killed in the middle of a ranged pull", () => {
  let server: ServerProcess | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await server?.stop(5_000);
    server = undefined;
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function startRunner(runtime: RuntimeName, registryHost: string, models: string) {
    server = await startServer({
      runtime,
      // The host name and signal 0: how the restarted server sees that the killed one's download lock is stale.
      ...(runtime === "deno" ? { runtimeArgs: denoPermissions([`--allow-read=${dir},.`, `--allow-write=${dir}`, "--allow-sys=homedir,hostname", "--allow-run"]) } : {}),
      env: {
        SERVICES: "runner",
        RUNNER_PORT: "0",
        RUNNER_SOCKET: "none",
        MODELS_PATH: models,
        DEFAULT_REGISTRY: registryHost,
        PULL_PARTS: String(PARTS.streams),
        PULL_PART_MIN_BYTES: String(PARTS.minBytes),
      },
      ready: [/model runner service listening on http:\/\/[\d.]+:\d+/],
    });
    return /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
  }

  it.each(["node", "bun", "deno"] as const)("fetches, after a SIGKILL, only the bytes its parts had not recorded (%s)", async (runtime) => {
    // 4 streams of 512 KiB/s: the 6 MiB take about 3 s, and a checkpoint is written every second.
    const f = await front({ bytesPerSecond: 512 << 10 });
    dir = await mkdtemp(join(tmpdir(), "llamadock-kill-"));
    const models = join(dir, "models");
    const url = await startRunner(runtime, f.host, models);
    const pulling = fetch(`${url}/models/create`, { method: "POST", body: JSON.stringify({ from: "ai/big" }) }).then((r) => r.text()).catch(() => "");
    const progressPath = createModelStore(models).layout.blobProgress(big.ggufDigest);
    await until(async () => ((await readProgress(progressPath, SIZE)) ?? []).some((p) => p.done > 0), "a checkpoint");
    server!.child.kill("SIGKILL");
    await pulling;
    await until(() => server!.child.exitCode !== null || server!.child.signalCode !== null, "the server to die");
    await until(() => f.blobGets().now === 0, "the dead server's connections to close");

    const recorded = (await readProgress(progressPath, SIZE))!;
    const missing = missingBytes(recorded);
    expect(missing).toBeGreaterThan(0);
    expect(missing).toBeLessThan(SIZE);
    const servedBefore = f.blobBytes(big.ggufDigest);

    const again = await startRunner(runtime, f.host, models);
    const text = await (await fetch(`${again}/models/create`, { method: "POST", body: JSON.stringify({ from: "ai/big" }) })).text();
    expect(text).toContain("Model pulled successfully");
    expect(f.blobBytes(big.ggufDigest) - servedBefore).toBe(missing);
    await server!.stop(5_000);
    server = undefined;
    await expectStored(models);
  });
});

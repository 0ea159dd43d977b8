import { randomBytes } from "node:crypto";
import { readdir, stat, writeFile, mkdir } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { modelArtifact, startHostileRegistry, type HostileRegistry, type Misbehaviour } from "../support/hostile-registry.ts";
import { sha256 } from "../support/registry.ts";
import { smallFilesystem } from "../support/small-filesystem.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";
import { call, modelApi, pull, type ModelApi } from "./helpers.ts";

// A registry or Hub that misbehaves, played by loopback servers, pulled from through the model
// routes: none may take the server down (memory) or hang a pull (silence), and pulls share the
// machine (how many run at once, how much disk they may need).

const STALL_MS = 300;
// Tests that would hang without a stall timeout fail in this time instead.
const HANG_LIMIT_MS = 15_000;

const weights = tinyLlamaGguf({ seed: 11 });
const digest = sha256(weights);

let api: ModelApi | undefined;
const registries: HostileRegistry[] = [];
const servers: Server[] = [];
afterEach(async () => {
  await api?.dispose();
  api = undefined;
  await Promise.all(registries.splice(0).map((r) => r.stop()));
  await Promise.all(
    servers.splice(0).map((server) => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    }),
  );
});

async function hostile(misbehaviour: Misbehaviour, ...repositories: string[]): Promise<HostileRegistry> {
  const registry = await startHostileRegistry(misbehaviour);
  registries.push(registry);
  for (const repository of repositories) registry.add(modelArtifact(repository, "latest", weights));
  return registry;
}

/** The most this process's resident memory grew while `work` ran, sampled every 20 ms. */
async function rssGrowth<T>(work: () => Promise<T>): Promise<{ result: T; growth: number }> {
  const before = process.memoryUsage.rss();
  let peak = before;
  const sample = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 20);
  try {
    const result = await work();
    return { result, growth: Math.max(peak, process.memoryUsage.rss()) - before };
  } finally {
    clearInterval(sample);
  }
}

const MiB = 1 << 20;

describe("a registry that misbehaves", () => {
  it("an endless manifest is refused after 4 MiB, and memory stays bounded", async () => {
    const registry = await hostile({ manifest: "endless" }, "ai/endless");
    api = await modelApi({ stallTimeoutMs: 5_000 });
    const { result, growth } = await rssGrowth(() => pull(api!.handler, { from: `${registry.host}/ai/endless` }));
    expect(result.status).toBe(502);
    expect(result.json.error).toMatchObject({ type: "upstream_error", code: "pull_failed" });
    expect(result.json.error.message).toBe(`the registry ${registry.host} sent the manifest of ${registry.host}/ai/endless:latest larger than 4 MiB: refused`);
    expect(growth).toBeLessThan(100 * MiB);
    // The socket buffers let the registry write a little past the bound; then it was left alone.
    await until(() => registry.sent() < 32 * MiB, "the registry to stop");
  });

  it("a manifest that declares more than 4 MiB is refused before it is read", async () => {
    const registry = await hostile({ manifest: "declared-huge" }, "ai/huge");
    api = await modelApi({ stallTimeoutMs: 5_000 });
    const answer = await pull(api.handler, { from: `${registry.host}/ai/huge` });
    expect(answer.status).toBe(502);
    expect(answer.json.error.message).toContain("larger than 4 MiB: refused");
  }, HANG_LIMIT_MS);

  it("a manifest that stops coming fails the pull after the stall timeout", async () => {
    const registry = await hostile({ manifest: "stall" }, "ai/stalled");
    api = await modelApi({ stallTimeoutMs: STALL_MS });
    const answer = await pull(api.handler, { from: `${registry.host}/ai/stalled` });
    expect(answer.status).toBe(502);
    expect(answer.json.error).toMatchObject({
      type: "upstream_error",
      message: `the registry ${registry.host} stopped sending the manifest of ${registry.host}/ai/stalled:latest for 300 ms`,
    });
  }, HANG_LIMIT_MS);

  it("a manifest request never answered fails the pull after the stall timeout", async () => {
    const registry = await hostile({ manifest: "silent" }, "ai/silent");
    api = await modelApi({ stallTimeoutMs: STALL_MS });
    const answer = await pull(api.handler, { from: `${registry.host}/ai/silent` });
    expect(answer.status).toBe(502);
    expect(answer.json.error.message).toBe(
      `the registry ${registry.host} did not answer the request for the manifest of ${registry.host}/ai/silent:latest within 300 ms`,
    );
  }, HANG_LIMIT_MS);

  it("a token realm that never answers fails the pull after the stall timeout", async () => {
    const registry = await hostile({ hangingRealm: true }, "ai/locked");
    api = await modelApi({ stallTimeoutMs: STALL_MS });
    const answer = await pull(api.handler, { from: `${registry.host}/ai/locked` });
    expect(answer.status).toBe(502);
    expect(answer.json.error).toMatchObject({
      type: "upstream_error",
      message: `the token service ${registry.host} did not answer the request for a token within 300 ms`,
    });
    expect(registry.requests.some((r) => r.startsWith("GET /token"))).toBe(true);
  }, HANG_LIMIT_MS);

  it("a blob that stops coming fails the pull with an error line; the next pull resumes from the kept bytes", async () => {
    const registry = await hostile({ blobs: { [digest]: { stallAfter: 100_000 } } }, "ai/stalled");
    api = await modelApi({ stallTimeoutMs: STALL_MS });
    const first = await pull(api.handler, { from: `${registry.host}/ai/stalled` });
    expect(first.status).toBe(200);
    expect(first.lines.at(-1)).toMatchObject({
      type: "error",
      message: `download of ${digest} failed (a new pull resumes it): the registry ${registry.host} stopped sending blob ${digest} for 300 ms`,
    });
    expect((await stat(api.store.layout.incompleteBlob(digest))).size).toBe(100_000);

    registry.misbehaviour.blobs = {};
    const second = await pull(api.handler, { from: `${registry.host}/ai/stalled` });
    expect(second.lines.at(-1)?.message).toBe("Model pulled successfully");
    expect(registry.requests).toContain(`GET /v2/ai/stalled/blobs/${digest} bytes=100000-`);
  }, HANG_LIMIT_MS);

  it("a blob longer than its descriptor is cut off and refused, and none of it is kept", async () => {
    const registry = await hostile({ blobs: { [digest]: { extra: 1000 } } }, "ai/long");
    api = await modelApi({ stallTimeoutMs: 5_000 });
    const first = await pull(api.handler, { from: `${registry.host}/ai/long` });
    expect(first.lines.at(-1)).toMatchObject({ type: "error", message: `blob ${digest} is larger than its ${weights.byteLength} bytes: refused` });
    // Bytes from a source that lied about the size are not resumed from.
    expect(await readdir(api.store.layout.blobsDir)).toEqual([]);

    registry.misbehaviour.blobs = {};
    const second = await pull(api.handler, { from: `${registry.host}/ai/long` });
    expect(second.lines.at(-1)?.message).toBe("Model pulled successfully");
    expect(registry.requests.filter((r) => r.includes(`/blobs/${digest} bytes=`))).toEqual([]);
  });

  it("a blob with other bytes than its digest says is refused and not kept (a guard: this was already so)", async () => {
    const other = tinyLlamaGguf({ seed: 12 });
    const registry = await hostile({ blobs: { [digest]: { replace: other } } }, "ai/wrong");
    api = await modelApi({ stallTimeoutMs: 5_000 });
    const { lines } = await pull(api.handler, { from: `${registry.host}/ai/wrong` });
    expect(lines.at(-1)).toMatchObject({ type: "error", message: expect.stringContaining(`expected ${digest}, got ${sha256(other)}`) });
    expect(await readdir(api.store.layout.blobsDir)).toEqual([]);
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
  });

  it("a config whose descriptor is over 4 MiB is refused before any layer is fetched", async () => {
    const registry = await hostile({});
    const config = new TextEncoder().encode(JSON.stringify({ config: { format: "gguf" }, padding: " ".repeat(5 * MiB) }));
    registry.add(modelArtifact("ai/fat-config", "latest", weights, { config }));
    api = await modelApi({ stallTimeoutMs: 5_000 });
    const answer = await pull(api.handler, { from: `${registry.host}/ai/fat-config` });
    expect(answer.status).toBe(502);
    expect(answer.json.error.message).toBe(
      `the config of ${registry.host}/ai/fat-config:latest is ${config.byteLength} bytes, more than the 4 MiB it may have: refused`,
    );
    expect(registry.requests.filter((r) => r.includes("/blobs/"))).toEqual([]);
  });

  it("a config body longer than its descriptor is cut off at its size, and memory stays bounded", async () => {
    const registry = await hostile({});
    const artifact = modelArtifact("ai/long-config", "latest", weights);
    registry.add(artifact);
    registry.misbehaviour.blobs = { [artifact.config.digest]: { extra: 300 * MiB } };
    api = await modelApi({ stallTimeoutMs: 5_000 });
    const { result, growth } = await rssGrowth(() => pull(api!.handler, { from: `${registry.host}/ai/long-config` }));
    expect(result.lines.at(-1)).toMatchObject({
      type: "error",
      message: `the registry ${registry.host} sent blob ${artifact.config.digest} larger than its ${artifact.config.size} bytes: refused`,
    });
    expect(growth).toBeLessThan(100 * MiB);
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
  });
});

describe("a Hugging Face Hub that misbehaves", () => {
  type Handle = (request: IncomingMessage, response: ServerResponse) => void;
  async function serve(handle: Handle): Promise<string> {
    const server = createServer(handle);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }
  const tree = JSON.stringify([
    { type: "file", path: "w-Q4_K_M.gguf", size: weights.byteLength, lfs: { oid: digest.slice(7), size: weights.byteLength } },
  ]);

  it("a file list over 4 MiB is refused", async () => {
    const hub = await serve((_request, response) => {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(`[${" ".repeat(5 * MiB)}]`);
    });
    api = await modelApi({ hfEndpoint: hub, stallTimeoutMs: 5_000 });
    const answer = await pull(api.handler, { from: "hf.co/org/repo" });
    expect(answer.status).toBe(502);
    expect(answer.json.error.message).toBe("the Hugging Face Hub sent the file list of org/repo larger than 4 MiB: refused");
  });

  it("a file download that stops coming fails the pull with an error line after the stall timeout", async () => {
    const hub = await serve((request, response) => {
      if (request.url?.startsWith("/api/")) return void response.writeHead(200, { "content-type": "application/json" }).end(tree);
      response.writeHead(200, { "content-length": String(weights.byteLength) });
      response.write(weights.subarray(0, 10_000));
    });
    api = await modelApi({ hfEndpoint: hub, stallTimeoutMs: STALL_MS });
    const { lines } = await pull(api.handler, { from: "hf.co/org/repo" });
    expect(lines.at(-1)).toMatchObject({ type: "error", message: expect.stringContaining("the Hugging Face Hub stopped sending w-Q4_K_M.gguf for 300 ms") });
    expect((await stat(api.store.layout.incompleteBlob(digest))).size).toBe(10_000);
  }, HANG_LIMIT_MS);
});

/** A pull's answer, read to its end in the background. */
const pulling = (from: string, signal?: AbortSignal) => pull(api!.handler, { from }, signal);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("pulls running at once", () => {
  /** A registry with models a, b, c (each its own weights) whose blobs wait until `release()`. */
  async function heldRegistry() {
    let release = () => {};
    const hold = new Promise<void>((resolve) => (release = resolve));
    const registry = await hostile({});
    const artifacts = ["a", "b", "c"].map((name, i) => modelArtifact(`ai/${name}`, "latest", tinyLlamaGguf({ seed: 20 + i })));
    for (const artifact of artifacts) registry.add(artifact);
    registry.misbehaviour.blobs = Object.fromEntries(artifacts.map((a) => [a.weights.digest, { hold }]));
    const asked = (name: string) => registry.requests.filter((r) => r.startsWith(`GET /v2/ai/${name}/`));
    return { registry, release, asked };
  }

  it("with a limit of 1, a second pull starts only once the first has ended", async () => {
    const { registry, release, asked } = await heldRegistry();
    api = await modelApi({ maxConcurrentPulls: 1 });
    const a = pulling(`${registry.host}/ai/a`);
    await until(() => asked("a").some((r) => r.includes("/blobs/")), "the first pull's blob request");
    let firstEnded = false;
    void a.then(() => (firstEnded = true));
    const b = pulling(`${registry.host}/ai/b`);
    await sleep(500);
    expect(asked("b")).toEqual([]);

    release();
    await until(() => asked("b").length > 0, "the second pull to start");
    expect(firstEnded).toBe(true);
    expect((await a).lines.at(-1)?.message).toBe("Model pulled successfully");
    expect((await b).lines.at(-1)?.message).toBe("Model pulled successfully");
  });

  it("a pull that joins a running pull of the same model takes no second slot", async () => {
    const { registry, release, asked } = await heldRegistry();
    api = await modelApi({ maxConcurrentPulls: 2 });
    const first = pulling(`${registry.host}/ai/a`);
    await until(() => asked("a").some((r) => r.includes("/blobs/")), "the first pull's blob request");
    const joined = pulling(`${registry.host}/ai/a`);
    const other = pulling(`${registry.host}/ai/b`);
    // Two slots: the joined pull holds none, so b starts while a still runs.
    await until(() => asked("b").some((r) => r.includes("/blobs/")), "the other model's blob request");
    release();
    const results = await Promise.all([first, joined, other]);
    expect(results.map((r) => r.lines.at(-1)?.message)).toEqual(["Model pulled successfully", "Model pulled successfully", "Model pulled successfully"]);
    expect(asked("a").filter((r) => r.includes("/manifests/"))).toHaveLength(1);
  });

  it("a client that leaves while waiting its turn leaves the line; the next one runs in its place", async () => {
    const { registry, release, asked } = await heldRegistry();
    api = await modelApi({ maxConcurrentPulls: 1 });
    const a = pulling(`${registry.host}/ai/a`);
    await until(() => asked("a").some((r) => r.includes("/blobs/")), "the first pull's blob request");
    const leaving = new AbortController();
    const b = pulling(`${registry.host}/ai/b`, leaving.signal);
    const c = pulling(`${registry.host}/ai/c`);
    await sleep(100);
    leaving.abort();
    expect((await b).status).toBe(499);

    release();
    expect((await a).lines.at(-1)?.message).toBe("Model pulled successfully");
    expect((await c).lines.at(-1)?.message).toBe("Model pulled successfully");
    expect(asked("b")).toEqual([]);
    expect((await call(api.handler, "GET", "/models")).json.map((m: { tags: string[] }) => m.tags[0]).sort()).toEqual([
      `${registry.host}/ai/a:latest`,
      `${registry.host}/ai/c:latest`,
    ]);
  }, HANG_LIMIT_MS);
});

describe("free space in the store", () => {
  it("answers 507 before streaming when the missing layers need more than is free", async () => {
    const registry = await hostile({}, "ai/roomy");
    api = await modelApi({ freeSpace: async () => 1000 });
    const answer = await pull(api.handler, { from: `${registry.host}/ai/roomy` });
    expect(answer.status).toBe(507);
    expect(answer.json.error).toEqual({
      type: "server_error",
      code: "insufficient_storage",
      message: `not enough free space to pull ${registry.host}/ai/roomy:latest: it needs 458.31KiB more, the model store has 1000.00B free`,
    });
    expect(registry.requests.filter((r) => r.includes("/blobs/"))).toEqual([]);
  });

  it("counts what an interrupted pull already holds, and pulls when the rest fits", async () => {
    const registry = await hostile({}, "ai/roomy");
    api = await modelApi({ freeSpace: async () => 1000 });
    await mkdir(api.store.layout.blobsDir, { recursive: true });
    await writeFile(api.store.layout.incompleteBlob(digest), weights.subarray(0, weights.byteLength - 500));
    const { lines } = await pull(api.handler, { from: `${registry.host}/ai/roomy` });
    expect(lines.at(-1)?.message).toBe("Model pulled successfully");
  });

  it("answers 507 on a real filesystem too small for the model (a 1 MiB tmpfs)", async (context) => {
    const small = await smallFilesystem(MiB, (why) => context.skip(why));
    try {
      const registry = await hostile({});
      registry.add(modelArtifact("ai/big", "latest", randomBytes(2 * MiB)));
      api = await modelApi({ root: join(small.path, "models") });
      const answer = await pull(api.handler, { from: `${registry.host}/ai/big` });
      expect(answer.status).toBe(507);
      expect(answer.json.error.code).toBe("insufficient_storage");
      expect(answer.json.error.message).toMatch(/it needs 2\.00MiB more, the model store has [\d.]+(KiB|MiB) free$/);
    } finally {
      await api?.dispose();
      api = undefined;
      await small.close();
    }
  });
});

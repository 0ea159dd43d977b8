import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createModelStore } from "../../src/models/index.ts";
import { modelArtifact, startHostileRegistry, type HostileRegistry, type Misbehaviour } from "../support/hostile-registry.ts";
import { sha256 } from "../support/registry.ts";
import { denoPermissions, projectRoot, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { smallFilesystem } from "../support/small-filesystem.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// The pull limits end to end: `src/index.ts` as a child process on each runtime, configured with
// PULL_STALL_TIMEOUT_MS and PULL_MAX_CONCURRENT, pulling from a registry that misbehaves; its own
// memory measured from /proc, its store's free space read with statfs.

const RUNTIMES = ["node", "bun", "deno"] as const;
const MiB = 1 << 20;
const weights = tinyLlamaGguf({ seed: 31 });
const digest = sha256(weights);

let server: ServerProcess | undefined;
let registry: HostileRegistry | undefined;
const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  await server?.stop(5_000);
  server = undefined;
  await registry?.stop();
  registry = undefined;
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function hostile(misbehaviour: Misbehaviour, ...repositories: string[]): Promise<HostileRegistry> {
  registry = await startHostileRegistry(misbehaviour);
  for (const repository of repositories) registry.add(modelArtifact(repository, "latest", weights));
  return registry;
}

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "llamadock-limits-"));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs the model runner with its store under `models`; Deno may read the free space (statfs). `prefix`: where it runs (a namespace). */
async function startRunner(runtime: RuntimeName, models: string, env: Record<string, string> = {}, prefix?: string[]) {
  const dir = join(models, "..");
  server = await startServer({
    runtime,
    ...(prefix ? { prefix } : {}),
    ...(runtime === "deno" ? { runtimeArgs: denoPermissions([`--allow-read=${dir},.`, `--allow-write=${dir}`, "--allow-sys=homedir,statfs"]) } : {}),
    env: { SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: "none", MODELS_PATH: models, ...env },
    ready: [/model runner service listening on http:\/\/[\d.]+:\d+/],
  });
  return /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
}

const create = (url: string, from: string) =>
  fetch(`${url}/models/create`, { method: "POST", body: JSON.stringify({ from }), headers: { "content-type": "application/json" } });

const lastLine = (text: string) => JSON.parse(text.trim().split("\n").at(-1)!);

/** The most resident memory the process has had (kB in /proc, bytes here). */
async function peakRss(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)![1]) * 1024;
}

describe("pull limits in the running server", () => {
  it.each(RUNTIMES)("a blob that stops coming fails the pull after PULL_STALL_TIMEOUT_MS and keeps its bytes (%s)", async (runtime) => {
    const { host } = await hostile({ blobs: { [digest]: { stallAfter: 100_000 } } }, "ai/stalled");
    const models = join(await tempDir(), "models");
    const url = await startRunner(runtime, models, { PULL_STALL_TIMEOUT_MS: "300" });
    const response = await create(url, `${host}/ai/stalled`);
    expect(response.status).toBe(200);
    expect(lastLine(await response.text())).toMatchObject({
      type: "error",
      message: expect.stringContaining(`the registry ${host} stopped sending blob ${digest} for 300 ms`),
    });
    expect((await stat(createModelStore(models).layout.incompleteBlob(digest))).size).toBe(100_000);
  }, 20_000);

  it.each(RUNTIMES)("an endless manifest is refused and the server's memory stays bounded (%s)", async (runtime) => {
    const { host, sent } = await hostile({ manifest: "endless" }, "ai/endless");
    const url = await startRunner(runtime, join(await tempDir(), "models"));
    const before = await peakRss(server!.pid);
    const response = await create(url, `${host}/ai/endless`);
    expect(response.status).toBe(502);
    expect((await response.json()).error.message).toContain("larger than 4 MiB: refused");
    const growth = (await peakRss(server!.pid)) - before;
    expect(growth).toBeLessThan(100 * MiB);
    await until(() => sent() < 32 * MiB, "the registry to stop");
  }, 30_000);

  it.for(RUNTIMES)("answers 507 when the store's filesystem cannot hold the model (a 1 MiB tmpfs) (%s)", { timeout: 30_000 }, async (runtime, context) => {
    const small = await smallFilesystem(MiB, (why) => context.skip(why));
    cleanups.push(() => small.close());
    const { host } = await hostile({});
    registry!.add(modelArtifact("ai/big", "latest", randomBytes(2 * MiB)));
    // The server runs in the filesystem's namespace, where the store is a plain path.
    const url = await startRunner(runtime, join(small.inside, "models"), {}, small.enter(projectRoot));
    const response = await create(url, `${host}/ai/big`);
    expect(response.status).toBe(507);
    expect((await response.json()).error).toMatchObject({ type: "server_error", code: "insufficient_storage", message: expect.stringContaining("it needs 2.00MiB more") });
    expect(registry!.requests.filter((r) => r.includes("/blobs/"))).toEqual([]);
  });

  it("PULL_MAX_CONCURRENT=1: a second pull waits until the first has ended", async () => {
    let release = () => {};
    const hold = new Promise<void>((resolve) => (release = resolve));
    const { host, requests } = await hostile({});
    const [a, b] = ["a", "b"].map((name, i) => modelArtifact(`ai/${name}`, "latest", tinyLlamaGguf({ seed: 40 + i })));
    registry!.add(a!);
    registry!.add(b!);
    registry!.misbehaviour.blobs = { [a!.weights.digest]: { hold } };
    const url = await startRunner("node", join(await tempDir(), "models"), { PULL_MAX_CONCURRENT: "1" });
    const first = create(url, `${host}/ai/a`).then((r) => r.text());
    await until(() => requests.some((r) => r.startsWith(`GET /v2/ai/a/blobs/${a!.weights.digest}`)), "the first pull's blob request");
    const second = create(url, `${host}/ai/b`).then((r) => r.text());
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(requests.filter((r) => r.startsWith("GET /v2/ai/b/"))).toEqual([]);
    release();
    expect(lastLine(await first).message).toBe("Model pulled successfully");
    expect(lastLine(await second).message).toBe("Model pulled successfully");
  }, 30_000);
});

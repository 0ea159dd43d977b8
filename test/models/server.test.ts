import { createHash } from "node:crypto";
import { readFile, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readGgufConfig } from "../../src/models/gguf.ts";
import { createModelStore } from "../../src/models/index.ts";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { pushModel, startRegistry, type PushedModel, type Registry } from "../support/registry.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";

// The model API end to end: `src/index.ts` as a child process, over TCP and its Unix socket,
// pulling from a real registry; a client that leaves cancels its pull; kill -9 mid-pull.

let registry: Registry;
let tiny: PushedModel;
let big: PushedModel;
let dir: string;
let server: ServerProcess | undefined;
let front: Front | undefined;

beforeAll(async () => {
  registry = await startRegistry();
  tiny = await pushModel(registry, "ai/tiny", "latest", tinyLlamaGguf());
  big = await pushModel(registry, "ai/big", "latest", tinyLlamaGguf({ seed: 7 }));
});
afterAll(async () => {
  await registry?.stop();
});
afterEach(async () => {
  await server?.stop(5_000);
  server = undefined;
  await front?.stop();
  front = undefined;
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function startRunner(defaultRegistry: string, root?: string, runtime: RuntimeName = "node") {
  dir = root ?? (await mkdtemp(join(tmpdir(), "llamadock-server-")));
  server = await startServer({
    runtime,
    // The store is read and written under MODELS_PATH; the socket file lives in the same folder.
    ...(runtime === "deno" ? { runtimeArgs: denoPermissions([`--allow-read=${dir},.`, `--allow-write=${dir}`]) } : {}),
    env: {
      SERVICES: "runner",
      RUNNER_PORT: "0",
      RUNNER_SOCKET: join(dir, "runner.sock"),
      MODELS_PATH: join(dir, "models"),
      DEFAULT_REGISTRY: defaultRegistry,
    },
    ready: [/model runner service listening on http:\/\/[\d.]+:\d+/, /model runner service listening on unix:/],
  });
  const url = /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
  return { url, socket: join(dir, "runner.sock"), models: join(dir, "models") };
}

async function readLines(response: Response, count: number): Promise<{ lines: any[]; reader: ReadableStreamDefaultReader<Uint8Array> }> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (text.split("\n").filter(Boolean).length < count) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  return { lines: text.split("\n").filter(Boolean).map((l) => JSON.parse(l)), reader };
}

const create = (url: string, from: string, init: RequestInit = {}) =>
  fetch(`${url}/models/create`, { method: "POST", body: JSON.stringify({ from }), headers: { "content-type": "application/json" }, ...init });

async function until(check: () => Promise<boolean>, what: string) {
  for (let i = 0; i < 400; i += 1) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const sizeOf = (path: string) => stat(path).then((s) => s.size, () => 0);

describe("the model API over HTTP", () => {
  it.each(["node", "bun", "deno"] as const)("pulls, lists, gets and deletes over TCP and the Unix socket, with and without the prefix (%s)", async (runtime) => {
    const { url, socket } = await startRunner(registry.host, undefined, runtime);
    const pulled = await (await create(url, "ai/tiny")).text();
    expect(pulled.trim().split("\n").at(-1)).toBe(JSON.stringify({ type: "success", message: "Model pulled successfully", total: tiny.size, mode: "pull" }));

    const dispatcher = new Agent({ connect: { socketPath: socket } });
    const overSocket = await fetch("http://localhost/exp/vDD4.40/models", { dispatcher } as RequestInit);
    const list = await overSocket.json();
    expect(list).toMatchObject([{ id: tiny.manifestDigest, tags: ["ai/tiny:latest"], config: { format: "gguf" } }]);
    expect(await (await fetch(`${url}/exp/vDD4.40/models/ai/tiny`)).json()).toEqual(list[0]);
    const missing = await fetch(`${url}/models/ai/absent`);
    expect(missing.status).toBe(404);
    expect((await missing.json()).error.code).toBe("model_not_found");

    const deleted = await fetch("http://localhost/models/ai/tiny", { method: "DELETE", dispatcher } as RequestInit);
    expect(await deleted.json()).toEqual([{ Untagged: "ai/tiny:latest" }, { Deleted: tiny.manifestDigest }]);
    expect(await (await fetch(`${url}/models`)).json()).toEqual([]);
    await dispatcher.close();
  });

  it.each(["node", "bun", "deno"] as const)("cancels the pull when the client goes away, keeping the partial blob for a resume (%s)", async (runtime) => {
    front = await startRegistryFront(registry.url, { stallBlobsAfter: 50_000 });
    const { url, models } = await startRunner(front.host, undefined, runtime);
    const controller = new AbortController();
    const response = await create(url, "ai/big", { signal: controller.signal });
    expect(response.status).toBe(200);
    const partial = createModelStore(models).layout.incompleteBlob(big.ggufDigest);
    await until(async () => (await sizeOf(partial)) === 50_000, "the partial blob");
    await readLines(response, 1);
    controller.abort();
    await until(async () => front!.abandoned.includes(big.ggufDigest), "the upstream download to be dropped");
    expect(await sizeOf(partial)).toBe(50_000);
    expect(await (await fetch(`${url}/models`)).json()).toEqual([]);
  });
});

describe("kill -9 in the middle of a pull", () => {
  it("leaves a store that lists and loads the models it had, and the pull resumes after a restart", async () => {
    let started = await startRunner(registry.host);
    await (await create(started.url, "ai/tiny")).text();
    front = await startRegistryFront(registry.url, { stallBlobsAfter: 100_000 });
    const stalled = create(started.url, `${front.host}/ai/big`).then((r) => r.text()).catch(() => "");
    const store = createModelStore(started.models);
    await until(async () => (await sizeOf(store.layout.incompleteBlob(big.ggufDigest))) === 100_000, "the partial blob");
    process.kill(server!.pid, "SIGKILL");
    await server!.exited;
    await stalled;
    await front.stop();

    started = await startRunner(registry.host, dir);
    const list = await (await fetch(`${started.url}/models`)).json();
    expect(list.map((m: { tags: string[] }) => m.tags)).toEqual([["ai/tiny:latest"]]);
    const model = (await store.resolve("ai/tiny"))!;
    const bytes = await readFile(model.ggufPath);
    expect(`sha256:${createHash("sha256").update(bytes).digest("hex")}`).toBe(tiny.ggufDigest);
    expect((await readGgufConfig(model.ggufPath, bytes.byteLength)).architecture).toBe("llama");

    front = await startRegistryFront(registry.url);
    const resumed = await (await create(started.url, `${front.host}/ai/big`)).text();
    expect(resumed).toContain("Model pulled successfully");
    expect(front.requests).toContain(`GET /v2/ai/big/blobs/${big.ggufDigest} bytes=100000-`);
  });
});

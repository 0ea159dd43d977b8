import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { MODEL_MEDIA, pushModel, sha256, startRegistry, type PushedModel, type Registry } from "../support/registry.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { call, modelApi, pull, type ModelApi, type PullLine } from "./helpers.ts";

// Pushes to a real registry (docker-registry on loopback) through the model routes: the model
// pulled back into another store is the same artifact, byte for byte, and skopeo (a client of
// the OCI distribution API that is not ours) copies it as one.

const run = promisify(execFile);

let source: Registry;
let target: Registry;
let tiny: PushedModel;
const license = new TextEncoder().encode("MIT, for the test\n");
const apis: ModelApi[] = [];
const fronts: Front[] = [];

beforeAll(async () => {
  [source, target] = await Promise.all([startRegistry(), startRegistry()]);
  tiny = await pushModel(source, "ai/tiny", "latest", tinyLlamaGguf(), { layers: [{ mediaType: MODEL_MEDIA.license, data: license }] });
});
afterAll(async () => {
  await Promise.all([source?.stop(), target?.stop()]);
});
afterEach(async () => {
  await Promise.all(apis.splice(0).map((a) => a.dispose()));
  await Promise.all(fronts.splice(0).map((f) => f.stop()));
});

async function api(options: Parameters<typeof modelApi>[0] = {}) {
  const created = await modelApi({ defaultRegistry: source.host, ...options });
  apis.push(created);
  return created;
}

async function front(options: Parameters<typeof startRegistryFront>[1]) {
  const started = await startRegistryFront(target.url, options);
  fronts.push(started);
  return started;
}

async function push(handler: ModelApi["handler"], name: string, body?: unknown) {
  const response = await handler(new Request(`http://model-runner/models/${name}/push`, { method: "POST", ...(body ? { body: JSON.stringify(body) } : {}) }));
  const text = await response.text();
  const ndjson = response.headers.get("content-type")?.includes("ndjson");
  return { status: response.status, lines: ndjson ? text.split("\n").filter(Boolean).map((l) => JSON.parse(l) as PullLine) : [], json: ndjson ? undefined : JSON.parse(text) };
}

/** A store holding ai/tiny, pulled from the source registry, tagged for `destination`. */
async function storeWithTiny(destination: string) {
  const store = await api();
  expect((await pull(store.handler, { from: "ai/tiny" })).lines.at(-1)).toMatchObject({ type: "success" });
  const [repo, tag] = destination.split(/:(?=[^/]*$)/);
  expect((await call(store.handler, "POST", `/models/ai/tiny/tag?repo=${repo}&tag=${tag}`)).status).toBe(201);
  return store;
}

describe("POST /models/{name}/push", () => {
  it("sends the stored artifact byte for byte: pulled back into another store it has the same id and the same blobs", async () => {
    const name = `${target.host}/team/tiny:v1`;
    const here = await storeWithTiny(name);
    const { status, lines } = await push(here.handler, name);
    expect(status).toBe(200);
    const progress = lines.filter((l) => l.type === "progress");
    // DMR's lines: per layer, `total` is that layer's size; the last line of each layer completes it.
    for (const [id, size] of [[tiny.ggufDigest, tiny.size], [sha256(license), license.byteLength]] as const) {
      const last = progress.filter((l) => l.layer?.id === id).at(-1);
      expect(last).toMatchObject({ type: "progress", total: size, layer: { id, size, current: size }, mode: "push" });
      expect(last!.message).toMatch(/^Uploaded: \d+\.\d\d MB$/);
    }
    expect(lines.at(-1)).toEqual({ type: "success", message: "Model pushed successfully", mode: "push" });

    const there = await api();
    expect((await pull(there.handler, { from: name })).lines.at(-1)).toMatchObject({ type: "success" });
    const [pushed] = (await call(there.handler, "GET", "/models")).json;
    expect(pushed).toMatchObject({ id: tiny.manifestDigest, tags: [name] });
    for (const digest of [tiny.ggufDigest, sha256(license)]) {
      const [mine, theirs] = await Promise.all([readFile(here.store.layout.blob(digest)), readFile(there.store.layout.blob(digest))]);
      expect(sha256(theirs)).toBe(digest);
      expect(theirs.equals(mine)).toBe(true);
    }
    // The registry serves the very manifest the source registry had.
    const manifest = await fetch(`${target.url}/v2/team/tiny/manifests/v1`, { headers: { accept: MODEL_MEDIA.manifest } });
    expect(sha256(new Uint8Array(await manifest.arrayBuffer()))).toBe(tiny.manifestDigest);
  });

  it("is an OCI artifact to skopeo: it inspects it and copies every blob, digests checked", async () => {
    const name = `${target.host}/team/skopeo:v1`;
    const here = await storeWithTiny(name);
    expect((await push(here.handler, name)).lines.at(-1)).toMatchObject({ type: "success" });
    const { stdout } = await run("skopeo", ["inspect", "--raw", "--tls-verify=false", `docker://${name}`]);
    expect(sha256(new TextEncoder().encode(stdout))).toBe(tiny.manifestDigest);
    const dir = await mkdtemp(join(tmpdir(), "llamadock-skopeo-"));
    try {
      await run("skopeo", ["copy", "--src-tls-verify=false", `docker://${name}`, `dir:${dir}`]);
      const files = await readdir(dir);
      const manifest = JSON.parse(await readFile(join(dir, "manifest.json"), "utf8"));
      expect(manifest.config.mediaType).toBe(MODEL_MEDIA.config);
      expect(manifest.layers.map((l: { mediaType: string }) => l.mediaType)).toEqual([MODEL_MEDIA.gguf, MODEL_MEDIA.license]);
      for (const { digest } of [manifest.config, ...manifest.layers]) {
        expect(files).toContain(digest.slice(7));
        expect(sha256(await readFile(join(dir, digest.slice(7))))).toBe(digest);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("skips the blobs the registry has: a second push uploads nothing but the manifest", async () => {
    const proxy = await front({});
    const name = `${proxy.host}/team/again:v1`;
    const here = await storeWithTiny(name);
    expect((await push(here.handler, name)).lines.at(-1)).toMatchObject({ type: "success" });
    const opened = () => proxy.requests.filter((r) => r.startsWith("POST /v2/team/again/blobs/uploads/")).length;
    // Three blobs (weights, license, config): the session opened first serves the first of them.
    expect(opened()).toBe(3);
    proxy.requests.length = 0;
    const again = await push(here.handler, name);
    expect(again.lines.at(-1)).toMatchObject({ type: "success" });
    expect(opened()).toBe(1); // the session that checks our right to push, then cancelled
    expect(proxy.requests.filter((r) => r.startsWith("HEAD /v2/team/again/blobs/"))).toHaveLength(3);
    expect(proxy.requests).toContain("PUT /v2/team/again/manifests/v1");
    // Every layer still reports complete.
    expect(again.lines.filter((l) => l.type === "progress" && l.layer?.current === l.layer?.size)).toHaveLength(2);
  });

  it("asks the token service for push access with the configured credentials", async () => {
    const credentials = { username: "pusher", password: "secret" };
    const proxy = await front({ token: { credentials } });
    const name = `${proxy.host}/team/token:v1`;
    const here = await storeWithTiny(name);
    // The same store, now with credentials for the front (pulls and pushes take them alike).
    const withCredentials = await api({ root: here.root, credentials: { [proxy.host]: credentials } });
    expect((await push(withCredentials.handler, name)).lines.at(-1)).toMatchObject({ type: "success" });
    expect(proxy.tokens.length).toBeGreaterThan(0);
  });

  it("refuses before streaming: 404 for an unknown model, 400 for a digest or Hugging Face, 401 without credentials, 403 when denied", async () => {
    const here = await storeWithTiny(`${target.host}/team/refused:v1`);
    const unknown = await push(here.handler, `${target.host}/team/nothing:v1`);
    expect(unknown.status).toBe(404);
    expect(unknown.json.error).toMatchObject({ code: "model_not_found", type: "not_found_error" });
    const digest = await push(here.handler, `${target.host}/team/refused@${tiny.manifestDigest}`);
    expect(digest.status).toBe(400);
    expect((await push(here.handler, "hf.co/someone/tiny")).status).toBe(400);

    const locked = await front({ token: { credentials: { username: "u", password: "p" } } });
    await call(here.handler, "POST", `/models/ai/tiny/tag?repo=${locked.host}/team/locked&tag=v1`);
    const refused = await push(here.handler, `${locked.host}/team/locked:v1`);
    expect(refused.status).toBe(401);
    expect(refused.json.error).toMatchObject({ type: "authentication_error", code: "unauthorized" });

    const readOnly = await front({ denyWrites: true });
    await call(here.handler, "POST", `/models/ai/tiny/tag?repo=${readOnly.host}/team/readonly&tag=v1`);
    const denied = await push(here.handler, `${readOnly.host}/team/readonly:v1`);
    expect(denied.status).toBe(403);
    expect(denied.json.error).toMatchObject({ type: "permission_error", code: "forbidden" });
    expect(denied.json.error.message).toContain("DENIED: requested access to the resource is denied");

    const body = await push(here.handler, `${target.host}/team/refused:v1`, { "bearer-token": 7 });
    expect(body.status).toBe(400);
  });

  it("rebuilds the artifact of a model whose config was never kept, says so, and the rebuilt one pulls back", async () => {
    const name = `${target.host}/team/rebuilt:v1`;
    const here = await storeWithTiny(name);
    // A store written before configs were kept: no config in the record, no config blob.
    const index = JSON.parse(await readFile(join(here.root, "models.json"), "utf8"));
    const configDigest = index.models[0].files.config as string;
    delete index.models[0].files.config;
    await writeFile(join(here.root, "models.json"), JSON.stringify(index));
    await rm(here.store.layout.blob(configDigest));
    const older = await api({ root: here.root });
    const { lines } = await push(older.handler, name);
    const warning = lines.find((l) => l.type === "warning");
    expect(warning?.message).toMatch(/not whole here.*rebuilt from the model's record, whose id is sha256:[0-9a-f]{64}/);
    expect(lines.at(-1)).toMatchObject({ type: "success" });
    const rebuiltId = /whose id is (sha256:[0-9a-f]{64})/.exec(warning!.message)![1]!;

    const there = await api();
    expect((await pull(there.handler, { from: name })).lines.at(-1)).toMatchObject({ type: "success" });
    const [pulled] = (await call(there.handler, "GET", "/models")).json;
    expect(pulled.id).toBe(rebuiltId!);
    expect(pulled.config).toMatchObject({ format: "gguf", architecture: "llama" });
    const manifest = JSON.parse(await readFile(there.store.layout.manifest(rebuiltId!), "utf8"));
    expect(manifest.layers.map((l: { digest: string }) => l.digest)).toEqual([tiny.ggufDigest, sha256(license)]);
  });
});

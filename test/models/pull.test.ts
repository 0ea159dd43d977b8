import { readdir, stat } from "node:fs/promises";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { MODEL_MEDIA, pushModel, startRegistry, type PushedModel, type Registry } from "../support/registry.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { call, modelApi, pull, type ModelApi } from "./helpers.ts";

// Pulls from a real registry (docker-registry on loopback), through the model routes.

let registry: Registry;
let tiny: PushedModel;
let api: ModelApi;
const fronts: Front[] = [];

beforeAll(async () => {
  registry = await startRegistry();
  tiny = await pushModel(registry, "ai/tiny", "latest", tinyLlamaGguf(), { modelConfig: { quantization: "F32" } });
  await pushModel(registry, "ai/tiny", "v2", tinyLlamaGguf({ seed: 2 }));
  await pushModel(registry, "ai/other", "latest", tinyLlamaGguf({ seed: 3 }), { configMediaType: "application/vnd.docker.container.image.v1+json" });
});
afterAll(async () => {
  await registry?.stop();
});
afterEach(async () => {
  await api?.dispose();
  await Promise.all(fronts.splice(0).map((f) => f.stop()));
});

async function front(options: Parameters<typeof startRegistryFront>[1]) {
  const started = await startRegistryFront(registry.url, options);
  fronts.push(started);
  return started;
}

describe("POST /models/create from a registry", () => {
  it("streams progress, stores the model, and lists, gets and deletes it", async () => {
    api = await modelApi({ defaultRegistry: registry.host });
    const { status, lines } = await pull(api.handler, { from: "ai/tiny" });
    expect(status).toBe(200);
    const progress = lines.filter((l) => l.type === "progress");
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)).toMatchObject({ total: tiny.size, layer: { id: tiny.ggufDigest, size: tiny.size, current: tiny.size }, mode: "pull" });
    expect(progress.at(-1)!.message).toMatch(/^Downloaded: \d+\.\d\d MB$/);
    expect(lines.at(-1)).toMatchObject({ type: "success", message: "Model pulled successfully" });

    const list = await call(api.handler, "GET", "/models");
    expect(list.json).toHaveLength(1);
    const model = list.json[0];
    expect(model).toMatchObject({
      id: tiny.manifestDigest,
      tags: ["ai/tiny:latest"],
      created: Date.parse("2026-01-02T03:04:05Z") / 1000,
      config: { format: "gguf", architecture: "llama", context_size: 512, quantization: "F32", parameters: expect.stringMatching(/K$/) },
    });
    expect(model.config.gguf["general.architecture"]).toBe("llama");
    expect(model.config.size).toMatch(/KiB$/);

    const hex = tiny.manifestDigest.slice(7);
    for (const name of ["ai/tiny", "ai/tiny:latest", "tiny", `${registry.host}/ai/tiny`, tiny.manifestDigest, hex.slice(0, 12), hex]) {
      const got = await call(api.handler, "GET", `/models/${name}`);
      expect(got.status, name).toBe(200);
      expect(got.json.id).toBe(tiny.manifestDigest);
    }
    expect((await call(api.handler, "GET", "/exp/vDD4.40/models/ai/tiny")).status).toBe(200);

    const stored = await api.store.resolve("ai/tiny");
    expect((await stat(stored!.ggufPath)).size).toBe(tiny.size);

    const deleted = await call(api.handler, "DELETE", "/models/ai/tiny");
    expect(deleted).toEqual({ status: 200, json: [{ Untagged: "ai/tiny:latest" }, { Deleted: tiny.manifestDigest }] });
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
    expect(await readdir(api.store.layout.blobsDir)).toEqual([]);
    expect((await call(api.handler, "DELETE", "/models/ai/tiny")).status).toBe(404);
  });

  it("answers a second pull of a present model with Using cached model", async () => {
    api = await modelApi({ defaultRegistry: registry.host });
    await pull(api.handler, { from: "ai/tiny" });
    const again = await pull(api.handler, { from: "ai/tiny:latest" });
    expect(again.lines).toEqual([{ type: "success", message: "Using cached model: ai/tiny:latest", mode: "pull" }]);
  });

  it("pulls by digest, and finds the model by that reference", async () => {
    api = await modelApi({ defaultRegistry: registry.host });
    const reference = `ai/tiny@${tiny.manifestDigest}`;
    const { lines } = await pull(api.handler, { from: reference });
    expect(lines.at(-1)?.message).toBe("Model pulled successfully");
    expect((await call(api.handler, "GET", `/models/${reference}`)).json.tags).toEqual([reference]);
  });

  it("joins a second pull of the same model while the first runs", async () => {
    api = await modelApi();
    const proxy = await front({});
    const [a, b] = await Promise.all([pull(api.handler, { from: `${proxy.host}/ai/tiny` }), pull(api.handler, { from: `${proxy.host}/ai/tiny` })]);
    expect(a.lines.at(-1)?.type).toBe("success");
    expect(b.lines.at(-1)?.type).toBe("success");
    expect(proxy.requests.filter((r) => r.startsWith(`GET /v2/ai/tiny/blobs/${tiny.ggufDigest}`))).toHaveLength(1);
  });

  it("answers 404 for a model the registry does not have, 422 for another config media type, 400 for a bad name", async () => {
    api = await modelApi({ defaultRegistry: registry.host });
    const missing = await pull(api.handler, { from: "ai/nothing-here" });
    expect(missing.status).toBe(404);
    expect(missing.json.error).toMatchObject({ type: "not_found_error", code: "model_not_found" });
    const other = await pull(api.handler, { from: "ai/other" });
    expect(other.status).toBe(422);
    expect(other.json.error.message).toContain("application/vnd.docker.container.image.v1+json");
    expect((await pull(api.handler, { from: "../x" })).status).toBe(400);
    expect((await pull(api.handler, { nope: 1 })).status).toBe(400);
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
    expect((await call(api.handler, "GET", "/models/ai/nothing")).status).toBe(404);
  });

  it("follows the bearer token flow, with credentials from the configuration", async () => {
    const credentials = { username: "puller", password: "s3cret" };
    const proxy = await front({ token: { credentials } });
    api = await modelApi({ credentials: { [proxy.host]: credentials } });
    const { lines } = await pull(api.handler, { from: `${proxy.host}/ai/tiny` });
    expect(lines.at(-1)?.type).toBe("success");
    expect(proxy.tokens.length).toBeGreaterThan(0);
  });

  it("answers 401 when the token service refuses, and pulls with a bearer-token given in the body", async () => {
    const proxy = await front({ token: { credentials: { username: "u", password: "p" }, accepted: ["given-token"] } });
    api = await modelApi();
    const refused = await pull(api.handler, { from: `${proxy.host}/ai/tiny` });
    expect(refused.status).toBe(401);
    expect(refused.json.error.type).toBe("authentication_error");
    const { lines } = await pull(api.handler, { from: `${proxy.host}/ai/tiny`, "bearer-token": "given-token" });
    expect(lines.at(-1)?.type).toBe("success");
  });

  it("resumes a blob whose connection was cut with a Range request", async () => {
    const cutAt = 100_000;
    const proxy = await front({ cutBlobsAfter: cutAt });
    api = await modelApi();
    const first = await pull(api.handler, { from: `${proxy.host}/ai/tiny` });
    expect(first.lines.at(-1)?.type).toBe("error");
    const partial = await stat(api.store.layout.incompleteBlob(tiny.ggufDigest));
    expect(partial.size).toBeGreaterThan(0);
    expect(partial.size).toBeLessThanOrEqual(cutAt);
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);

    const second = await pull(api.handler, { from: `${proxy.host}/ai/tiny` });
    expect(second.lines.at(-1)?.message).toBe("Model pulled successfully");
    expect(proxy.requests).toContain(`GET /v2/ai/tiny/blobs/${tiny.ggufDigest} bytes=${partial.size}-`);
    expect((await stat(api.store.layout.blob(tiny.ggufDigest))).size).toBe(tiny.size);
  });

  it("stores nothing when a blob does not match its digest", async () => {
    const proxy = await front({ corruptBlob: tiny.ggufDigest });
    api = await modelApi();
    const { status, lines } = await pull(api.handler, { from: `${proxy.host}/ai/tiny` });
    expect(status).toBe(200);
    expect(lines.at(-1)).toMatchObject({ type: "error", message: expect.stringContaining("does not match its digest") });
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
    expect(await readdir(api.store.layout.blobsDir)).toEqual([]);
  });

  it("pulls extra layers and exposes the mmproj path", async () => {
    api = await modelApi({ defaultRegistry: registry.host });
    const mmproj = tinyLlamaGguf({ seed: 9 });
    await pushModel(registry, "ai/vision", "latest", tinyLlamaGguf({ seed: 8 }), { layers: [{ mediaType: MODEL_MEDIA.mmproj, data: mmproj }] });
    const { lines } = await pull(api.handler, { from: "ai/vision" });
    expect(lines.at(-1)?.type).toBe("success");
    const model = await api.store.resolve("ai/vision");
    expect((await stat(model!.mmprojPath!)).size).toBe(mmproj.byteLength);
  });
});

describe("DELETE and tag", () => {
  it("tags, refuses to delete a model with several tags by id without force, then deletes it", async () => {
    let unloaded: string[] = [];
    api = await modelApi({ defaultRegistry: registry.host, whileDeleting: (m, remove) => (unloaded.push(m.id), remove()) });
    await pull(api.handler, { from: "ai/tiny" });
    const tagged = await api.handler(new Request("http://m/models/ai/tiny/tag?repo=myorg/tiny&tag=v1", { method: "POST" }));
    expect(tagged.status).toBe(201);
    expect((await call(api.handler, "GET", "/models/myorg/tiny:v1")).json.tags).toEqual(["ai/tiny:latest", "myorg/tiny:v1"]);

    const id = tiny.manifestDigest;
    const conflict = await call(api.handler, "DELETE", `/models/${id}`);
    expect(conflict.status).toBe(409);
    expect(conflict.json.error.type).toBe("conflict_error");

    expect((await call(api.handler, "DELETE", "/models/myorg/tiny:v1")).json).toEqual([{ Untagged: "myorg/tiny:v1" }]);
    expect(unloaded).toEqual([]);
    await api.handler(new Request("http://m/models/ai/tiny/tag?repo=myorg/tiny&tag=v1", { method: "POST" }));
    const forced = await call(api.handler, "DELETE", `/models/${id.slice(7, 19)}?force=true`);
    expect(forced.json).toEqual([{ Untagged: "ai/tiny:latest" }, { Untagged: "myorg/tiny:v1" }, { Deleted: id }]);
    expect(unloaded).toEqual([id]);
  });
});

import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { FILEPATH_ANNOTATION } from "../../src/models/artifact.ts";
import { packageModel, PackageError, type PackageFiles } from "../../src/models/package/archive.ts";
import { tarEnd, tarHeader, tarPadding } from "../../src/models/package/tar.ts";
import { MODEL_MEDIA, sha256 } from "../support/registry.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { smallFilesystem } from "../support/small-filesystem.ts";
import { tinyLlamaGguf, tinyLlamaShards } from "../support/tiny-gguf.ts";
import { call, modelApi, type ModelApi } from "./helpers.ts";

// Packaging local files into a model: the archive built from real files (as `llamadock package`
// builds it) loaded through `POST /models/load`, and archives that must be refused, each leaving
// no model behind (and what they brought for purge to take).

let dir: string;
let api: ModelApi;
const weights = tinyLlamaGguf();
const projector = tinyLlamaGguf({ seed: 5 });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-package-"));
  await writeFile(join(dir, "tiny.gguf"), weights);
  // A model split in two as gguf-split writes it: a package's weights are checked to make one model.
  const [first, second] = tinyLlamaShards(2, { seed: 8 });
  await writeFile(join(dir, "tiny-00001-of-00002.gguf"), first!);
  await writeFile(join(dir, "tiny-00002-of-00002.gguf"), second!);
  await writeFile(join(dir, "mmproj-tiny.gguf"), projector);
  await writeFile(join(dir, "template.jinja"), "{% for m in messages %}{{ m.content }}{% endfor %}");
  await writeFile(join(dir, "LICENSE"), "MIT\n");
  await writeFile(join(dir, "not.gguf"), "this is not a model\n");
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
afterEach(async () => {
  await api?.dispose();
});

async function load(body: ReadableStream<Uint8Array> | Uint8Array, tag?: string) {
  const query = tag ? `?tag=${encodeURIComponent(tag)}` : "";
  const response = await api.handler(new Request(`http://model-runner/models/load${query}`, { method: "POST", body, duplex: "half" } as RequestInit));
  return { status: response.status, json: await response.json() };
}

const packaged = (files: PackageFiles) => packageModel({ ...files, weights: files.weights.map((w) => join(dir, w)) });

/** A sound model's archive with `entry` between its weights and its manifest: refused as a whole, once a blob is in. */
async function escaping(entry: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
  const pkg = await packaged({ weights: ["tiny.gguf"] });
  return Buffer.concat([fileEntry(`blobs/sha256/${sha256(weights).slice(7)}`, weights), entry, fileEntry("manifest.json", pkg.artifact.manifest), tarEnd()]);
}

/** An archive of these entries, as a tar writer lays them out. */
function tarOf(entries: [string, Uint8Array][]): Uint8Array {
  const parts = entries.flatMap(([name, bytes]) => [tarHeader(name, bytes.byteLength), bytes, tarPadding(bytes.byteLength)]);
  return Buffer.concat([...parts, tarEnd()]);
}

const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** A ustar header of another type than a file ("1" hard link, "2" symbolic link, "x" PAX records, "L" GNU long name), naming `linkname`. */
function typedHeader(name: string, size: number, type: string, linkname = ""): Uint8Array {
  const header = tarHeader(name, size);
  header[156] = type.charCodeAt(0);
  header.set(new TextEncoder().encode(linkname), 157);
  header.fill(32, 148, 156);
  const sum = header.reduce((a, b) => a + b, 0);
  header.set(new TextEncoder().encode(`${sum.toString(8).padStart(6, "0")}\0 `), 148);
  return header;
}

/** A PAX extended header entry carrying `records` (`<length> <key>=<value>\n` each) for the next entry. */
function paxEntry(records: Record<string, string>): Uint8Array {
  const lines = Object.entries(records).map(([key, value]) => {
    const body = ` ${key}=${value}\n`;
    let length = body.length + 1;
    while (String(length).length + body.length !== length) length++;
    return `${length}${body}`;
  });
  const data = new TextEncoder().encode(lines.join(""));
  return Buffer.concat([typedHeader("PaxHeaders/x", data.byteLength, "x"), data, tarPadding(data.byteLength)]);
}

const fileEntry = (name: string, bytes: Uint8Array) => Buffer.concat([tarHeader(name, bytes.byteLength), bytes, tarPadding(bytes.byteLength)]);

/** Entries that a tar program would unpack outside its folder (at `outside`, or elsewhere), each with the refusal it must get. */
function escapes() {
  const outside = join(tmpdir(), `llamadock-escaped-${randomBytes(4).toString("hex")}`);
  const climb = `blobs/sha256/${"../".repeat(tmpdir().split("/").length + 8)}${outside.slice(1)}`;
  const payload = new TextEncoder().encode("not for outside");
  const innocent = `blobs/sha256/${sha256(payload).slice(7)}`;
  const cases: [string, Uint8Array, RegExp][] = [
    ["a name that climbs out", fileEntry(`../${outside.split("/").at(-1)}`, payload), /the entry "\.\.\/llamadock-escaped-\w+" climbs out of the archive \(\.\.\)/],
    ["a blob name that climbs out", fileEntry(climb, payload), /climbs out of the archive/],
    ["an absolute name", fileEntry(outside, payload), /the entry "\/.*llamadock-escaped-\w+" has an absolute path/],
    ["a symbolic link out", typedHeader(innocent, 0, "2", outside), /is a symbolic link \(to "\/.*llamadock-escaped-\w+"\): a model archive holds files only/],
    ["a hard link out", typedHeader(innocent, 0, "1", "../../../etc/passwd"), /is a hard link \(to "\.\.\/\.\.\/\.\.\/etc\/passwd"\)/],
    ["a link named by a PAX linkpath", Buffer.concat([paxEntry({ linkpath: outside }), typedHeader(innocent, 0, "2")]), /is a symbolic link \(to "\/.*llamadock-escaped-\w+"\)/],
    ["a PAX path that climbs out", Buffer.concat([paxEntry({ path: `../../${outside.split("/").at(-1)}` }), fileEntry(innocent, payload)]), /the entry "\.\.\/\.\.\/llamadock-escaped-\w+" climbs out/],
    ["a PAX path that is absolute", Buffer.concat([paxEntry({ path: outside }), fileEntry(innocent, payload)]), /has an absolute path/],
    ["a name with `.` parts (judged by where it lands, not as text)", fileEntry(`./././${innocent}`, payload), /the entry "\.\/\.\/\.\/blobs\/sha256\/\w+" is not written plainly/],
    ["a name with an empty part", fileEntry(`blobs//sha256/${sha256(payload).slice(7)}`, payload), /is not written plainly \(an empty or "\." part\)/],
    ["a GNU long name that climbs out", Buffer.concat([typedHeader("././@LongLink", climb.length, "L"), new TextEncoder().encode(climb), tarPadding(climb.length), fileEntry(innocent, payload)]), /climbs out of the archive/],
  ];
  return { outside, payload, cases };
}

/** An archive of `layer` (as weights) and a config, with a manifest naming them. */
function artifactArchive(layer: Uint8Array, options: { configMediaType?: string; claimed?: Uint8Array; extraLayer?: string } = {}) {
  const config = encode({ config: { format: "gguf" }, descriptor: { created: "2026-01-02T03:04:05Z" } });
  const named = options.claimed ?? layer;
  const manifest = encode({
    schemaVersion: 2,
    mediaType: MODEL_MEDIA.manifest,
    config: { mediaType: options.configMediaType ?? MODEL_MEDIA.config, digest: sha256(config), size: config.byteLength },
    layers: [
      { mediaType: MODEL_MEDIA.gguf, digest: sha256(named), size: named.byteLength },
      ...(options.extraLayer ? [{ mediaType: MODEL_MEDIA.license, digest: options.extraLayer, size: 4 }] : []),
    ],
  });
  return tarOf([
    [`blobs/sha256/${sha256(named).slice(7)}`, layer],
    [`blobs/sha256/${sha256(config).slice(7)}`, config],
    ["manifest.json", manifest],
  ]);
}

describe("POST /models/load", () => {
  it("records a packaged model under its tag: weights, projector, template and license, each layer named by its file", async () => {
    api = await modelApi();
    const pkg = await packaged({ weights: ["tiny.gguf"], mmproj: join(dir, "mmproj-tiny.gguf"), chatTemplate: join(dir, "template.jinja"), licenses: [join(dir, "LICENSE")] });
    const { status, json } = await load(pkg.archive(), "me/tiny");
    expect(status, JSON.stringify(json)).toBe(200);
    expect(json).toMatchObject({ type: "success", message: "Model loaded successfully", id: pkg.artifact.id, tags: ["me/tiny:latest"] });
    expect(json.config).toMatchObject({ format: "gguf", architecture: "llama", context_size: 512 });
    const model = await api.store.resolve("me/tiny");
    expect(model?.ggufPath).toBe(api.store.layout.blob(sha256(weights)));
    expect(model?.mmprojPath).toBe(api.store.layout.blob(sha256(projector)));
    const manifest = JSON.parse(await readFile(api.store.layout.manifest(pkg.artifact.id), "utf8"));
    expect(manifest.layers.map((l: { mediaType: string; annotations: Record<string, string> }) => [l.mediaType, l.annotations[FILEPATH_ANNOTATION]])).toEqual([
      [MODEL_MEDIA.gguf, "tiny.gguf"],
      [MODEL_MEDIA.mmproj, "mmproj-tiny.gguf"],
      ["application/vnd.docker.ai.chat.template.jinja", "template.jinja"],
      [MODEL_MEDIA.license, "LICENSE"],
    ]);
    // The config blob is in the store, as the manifest names it (so the model can be pushed as it is).
    expect(sha256(await readFile(api.store.layout.blob(manifest.config.digest)))).toBe(manifest.config.digest);
    const config = JSON.parse(await readFile(api.store.layout.blob(manifest.config.digest), "utf8"));
    expect(config.config).toMatchObject({ format: "gguf", architecture: "llama", size: json.config.size });
    expect(config.rootfs.diff_ids).toEqual(manifest.layers.map((l: { digest: string }) => l.digest));
    // The same archive again: the same model, nothing new.
    expect((await load(pkg.archive(), "me/tiny:v2")).json).toMatchObject({ id: pkg.artifact.id, tags: ["me/tiny:latest", "me/tiny:v2"] });
  });

  it("keeps shards in their order, and lists the model with their summed size", async () => {
    api = await modelApi();
    const both = await packaged({ weights: ["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"] });
    const { json } = await load(both.archive(), "me/sharded");
    const manifest = JSON.parse(await readFile(api.store.layout.manifest(json.id), "utf8"));
    expect(manifest.layers.map((l: { annotations: Record<string, string> }) => l.annotations[FILEPATH_ANNOTATION])).toEqual(["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"]);
    const index = JSON.parse(await readFile(join(api.root, "models.json"), "utf8"));
    expect(index.models[0].files.gguf).toEqual(manifest.layers.map((l: { digest: string }) => l.digest));
    const size = (bytes: number) => `${(bytes / 1024).toFixed(2)}KiB`;
    expect(json.config.size).toBe(size(both.layers[0]!.size + both.layers[1]!.size));
  });

  it("leaves a model untagged without ?tag= (DMR's client tags it next, by id), and purge of unused models takes it", async () => {
    api = await modelApi();
    const pkg = await packaged({ weights: ["tiny.gguf"] });
    expect((await load(pkg.archive())).json).toMatchObject({ id: pkg.artifact.id, tags: [] });
    expect((await call(api.handler, "GET", "/models")).json).toMatchObject([{ id: pkg.artifact.id, tags: [] }]);
    await load(pkg.archive());
    const purged = await call(api.handler, "DELETE", "/models/purge?unused=true&older-than=0");
    expect(purged.json.deleted).toEqual([{ id: pkg.artifact.id, tags: [] }]);
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
    expect((await load(pkg.archive())).status).toBe(200);
    expect((await call(api.handler, "POST", `/models/${pkg.artifact.id}/tag?repo=me/tagged&tag=v1`)).status).toBe(201);
    expect((await call(api.handler, "GET", "/models/me/tagged:v1")).json.id).toBe(pkg.artifact.id);
  });

  it("refuses a bad archive with 400 (422 for an artifact of another kind) and records no model", async () => {
    api = await modelApi();
    const refusals: [string, Uint8Array, number, RegExp][] = [
      ["not a tar", new Uint8Array(1024).fill(65), 400, /not a valid tar: a numeric field holds "AAAAAAAA"/],
      ["a tar with a damaged header", (() => { const t = tarOf([["manifest.json", encode({})]]); t[10] = 0x41; return t; })(), 400, /not a valid tar: a header's checksum does not match/],
      ["no manifest", tarOf([[`blobs/sha256/${sha256(weights).slice(7)}`, weights]]), 400, /has no manifest.json/],
      ["weights that are not GGUF", artifactArchive(new TextEncoder().encode("not a model at all")), 400, /is not a GGUF file/],
      ["bytes that do not match their name", artifactArchive(tinyLlamaGguf({ seed: 3 }), { claimed: tinyLlamaGguf({ seed: 4 }) }), 400, /do not match that digest/],
      ["a blob in neither the archive nor the store", artifactArchive(weights, { extraLayer: sha256(new Uint8Array([1, 2, 3, 4])) }), 400, /neither in the archive nor in the store/],
      ["an image, not a model", artifactArchive(weights, { configMediaType: "application/vnd.oci.image.config.v1+json" }), 422, /unsupported model config media type/],
      ["a manifest that is not JSON", tarOf([["manifest.json", new TextEncoder().encode("{")]]), 400, /manifest.json is not JSON/],
    ];
    for (const [what, archive, status, message] of refusals) {
      const answer = await load(archive, "me/bad");
      expect(answer.status, what).toBe(status);
      expect(answer.json.error.message, what).toMatch(message);
    }
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
    // What the refused archives brought is unused, and purge takes it.
    expect((await api.store.unused(0)).files).toBeGreaterThan(0);
    await call(api.handler, "DELETE", "/models/purge?unused=true&older-than=0");
    expect(await api.store.unused(0)).toEqual({ files: 0, bytes: 0, incompleteBytes: 0 });
  });

  it("refuses, with a 400, entries that would land outside the folder it is unpacked in: nothing written outside, no model, and the next load works", async () => {
    api = await modelApi();
    const { outside, payload, cases } = escapes();
    for (const [what, entry, message] of cases) {
      const answer = await load(await escaping(entry), "me/escape");
      expect(answer.status, what).toBe(400);
      expect(answer.json, what).toEqual({ error: { type: "invalid_request_error", code: "unsafe_archive", message: expect.stringMatching(message) } });
      expect(answer.json.error.message, what).toMatch(/^the model archive is refused: /);
    }
    await expect(stat(outside)).rejects.toMatchObject({ code: "ENOENT" });
    expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
    // No partial file: only whole blobs (what came before the refusal, unused, for purge to take).
    expect((await readdir(api.store.layout.blobsDir)).filter((n) => !/^[0-9a-f]{64}$/.test(n))).toEqual([]);
    expect(await readdir(api.store.layout.blobsDir)).not.toContain(sha256(payload).slice(7));
    // The server goes on: a sound archive loads.
    const pkg = await packaged({ weights: ["tiny.gguf"] });
    expect((await load(pkg.archive(), "me/after")).status).toBe(200);
    expect((await call(api.handler, "GET", "/models/me/after")).json.id).toBe(pkg.artifact.id);
  });

  it("answers 507 when the store's disk fills during the load (a 1 MiB tmpfs), records nothing, and loads once there is room", async (context) => {
    const small = await smallFilesystem(1 << 20, (why) => context.skip(why));
    try {
      api = await modelApi({ root: join(small.path, "models") });
      await writeFile(join(dir, "big.gguf"), tinyLlamaGguf({ embedding: 256, feedForward: 512, layers: 2, seed: 6 }));
      const big = await packaged({ weights: ["big.gguf"] });
      const answer = await load(big.archive(), "me/big");
      expect(answer.status).toBe(507);
      expect(answer.json).toEqual({ error: { type: "server_error", code: "insufficient_storage", message: `the model store's disk is full (loading ${big.layers[0]!.digest})` } });
      expect((await call(api.handler, "GET", "/models")).json).toEqual([]);
      // What the failed load wrote is unused: purge frees the room, and a model that fits loads.
      await call(api.handler, "DELETE", "/models/purge?unused=true&older-than=0");
      const tiny = await packaged({ weights: ["tiny.gguf"] });
      expect((await load(tiny.archive(), "me/tiny")).status).toBe(200);
    } finally {
      await api?.dispose();
      await small.close();
    }
  });

  it("packaging refuses a file that is not GGUF, or not there, before sending anything", async () => {
    await expect(packaged({ weights: ["not.gguf"] })).rejects.toThrow(PackageError);
    await expect(packaged({ weights: ["not.gguf"] })).rejects.toThrow(/is not a GGUF file/);
    await expect(packaged({ weights: ["missing.gguf"] })).rejects.toThrow(/is not a file/);
    await expect(packaged({ weights: ["tiny.gguf"], mmproj: join(dir, "not.gguf") })).rejects.toThrow(/not\.gguf is not a GGUF file/);
  });
});

describe("POST /models/load on a running server", () => {
  let server: ServerProcess | undefined;
  let models: string | undefined;
  afterEach(async () => {
    await server?.stop(5_000);
    server = undefined;
    if (models) await rm(models, { recursive: true, force: true });
  });

  it.each<RuntimeName>(["node", "bun", "deno"])("answers each escaping archive over HTTP with a 400 unsafe_archive, and goes on serving (%s)", async (runtime) => {
    models = await mkdtemp(join(tmpdir(), "llamadock-load-server-"));
    server = await startServer({
      runtime,
      ...(runtime === "deno" ? { runtimeArgs: denoPermissions([`--allow-read=${models},.`, `--allow-write=${models}`]) } : {}),
      env: { SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: "none", MODELS_PATH: join(models, "store") },
      ready: [/model runner service listening on http:\/\/[\d.]+:\d+/],
    });
    const url = /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
    const post = (body: Uint8Array<ArrayBuffer>) => fetch(`${url}/models/load?tag=me/escape`, { method: "POST", headers: { "content-type": "application/x-tar" }, body });
    const { outside, cases } = escapes();
    for (const [what, entry, message] of cases) {
      const response = await post(await escaping(entry));
      expect(response.status, what).toBe(400);
      expect(await response.json(), what).toEqual({ error: { type: "invalid_request_error", code: "unsafe_archive", message: expect.stringMatching(message) } });
    }
    await expect(stat(outside)).rejects.toMatchObject({ code: "ENOENT" });
    expect(await (await fetch(`${url}/models`)).json()).toEqual([]);
    const pkg = await packaged({ weights: ["tiny.gguf"] });
    const loaded = await fetch(`${url}/models/load?tag=me/after`, { method: "POST", body: pkg.archive(), duplex: "half" } as RequestInit);
    expect(loaded.status).toBe(200);
    expect(((await (await fetch(`${url}/models`)).json()) as { tags: string[] }[]).map((m) => m.tags)).toEqual([["me/after:latest"]]);
  }, 60_000);
});

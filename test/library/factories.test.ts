import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { albumOf, startPhotoService, type PhotoService } from "../album/photo-service.ts";
import { ConfigError, createAlbumService, createModelRunner, mountAt, type LibraryService } from "../../src/library/index.ts";

// The library's factories and mountAt, called by fetch as a user's test would (no listener): the
// settings they take and refuse, the guard on `fetch` and not on `handler`, the prefix taken off,
// a body streamed through, and the model runner's drain and stop.

let photos: PhotoService;
let dir: string;
let runner: LibraryService;

beforeAll(async () => {
  photos = await startPhotoService(albumOf(2));
  dir = await mkdtemp(join(tmpdir(), "llamadock-factories-"));
  runner = await createModelRunner({ settings: { API_KEYS: "sk-1", HEALTH_PATHS_OPEN: "true" }, env: { HOME: dir } });
});

afterAll(async () => {
  await runner?.stop();
  await photos?.close();
  await rm(dir, { recursive: true, force: true });
});

const key = { authorization: "Bearer sk-1" };

describe("the library's factories", () => {
  it("refuse a setting the configuration does not know, and an invalid one, with ConfigError", async () => {
    await expect(createAlbumService({ settings: { PHOTOS_URL: "http://x" } as never })).rejects.toThrow(new ConfigError("unknown setting(s): PHOTOS_URL"));
    await expect(createAlbumService({ settings: { PHOTOS_API_BASE_URL: "ftp://x" } })).rejects.toBeInstanceOf(ConfigError);
  });

  it("take settings over the env they are given, and read nothing else", async () => {
    const album = await createAlbumService({ settings: { PHOTOS_API_BASE_URL: photos.url }, env: { PHOTOS_API_BASE_URL: "http://127.0.0.1:9", ALBUM_PORT: "9999" } });
    expect(album.config.album).toMatchObject({ photosBaseUrl: photos.url, port: 9999 });
    expect((await album.fetch(new Request("http://127.0.0.1/api/albums/3"))).status).toBe(200);
    // The home folder the runner's paths hang from is the given env's, not this process's.
    expect(runner.config.models.path).toBe(join(dir, ".llamadock", "models"));
  });

  it("put `fetch` behind the guard, not `handler`", async () => {
    const album = await createAlbumService({ settings: { PHOTOS_API_BASE_URL: photos.url } });
    const foreign = { headers: { origin: "https://evil.example" } };
    expect((await album.fetch(new Request("http://127.0.0.1/api/albums/3", foreign))).status).toBe(403);
    expect((await album.handler(new Request("http://127.0.0.1/api/albums/3", foreign))).status).toBe(200);
    expect((await runner.fetch(new Request("http://127.0.0.1/models"))).status).toBe(401);
    expect((await runner.fetch(new Request("http://127.0.0.1/models", { headers: key }))).status).toBe(200);
  });

  it("drain the model runner: new requests get 503, probes still answer", async () => {
    const draining = await createModelRunner({ env: { HOME: dir } });
    await draining.drain(1_000);
    const refused = await draining.fetch(new Request("http://127.0.0.1/models"));
    expect(refused.status).toBe(503);
    expect((await refused.json()).error.type).toBeDefined();
    expect((await draining.fetch(new Request("http://127.0.0.1/livez"))).status).toBe(200);
    await draining.stop();
  });
});

describe("mountAt", () => {
  const echo = mountAt("/llm/", async (request) => Response.json({ url: request.url, method: request.method, body: await request.text() }));

  it("takes the prefix off, keeps the query, and streams a body through", async () => {
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"a":'));
        controller.enqueue(new TextEncoder().encode("1}"));
        controller.close();
      },
    });
    const answer = await echo(new Request("http://host.example/llm/v1/chat?x=1", { method: "POST", body, duplex: "half" } as RequestInit));
    expect(await answer.json()).toEqual({ url: "http://host.example/v1/chat?x=1", method: "POST", body: '{"a":1}' });
    expect(await (await echo(new Request("http://host.example/llm"))).json()).toMatchObject({ url: "http://host.example/" });
  });

  it("answers 404 in the error envelope outside its prefix (/llmx is not under /llm)", async () => {
    const outside = await echo(new Request("http://host.example/llmx/v1/models"));
    expect(outside.status).toBe(404);
    expect(await outside.json()).toEqual({ error: { message: "no route for /llmx/v1/models: this handler is mounted at /llm", type: "not_found_error", code: "not_found" } });
  });

  it("lets the guard see the routes' own paths: an open path stays open under a prefix", async () => {
    const mounted = mountAt("/llm", runner.fetch);
    expect((await mounted(new Request("http://127.0.0.1/llm/livez"))).status).toBe(200);
    expect((await mounted(new Request("http://127.0.0.1/llm/v1/models"))).status).toBe(401);
  });
});

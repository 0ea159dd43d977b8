import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import type { ServerResponse } from "node:http";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { envNames } from "../../src/config.ts";
import { UNDICI_ENV_NAMES } from "../../src/runtime/undici-fetch.ts";
import { parseExact } from "../album/harness.ts";
import { albumOf, json, photosJson, startPhotoService, type Answer, type PhotoService } from "../album/photo-service.ts";
import { startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { ask, call, type Target } from "../support/http.ts";

// The album service as it ships: `src/index.ts` run by each runtime as a child process, in front
// of a photo service on loopback.

const runtimes: RuntimeName[] = ["bun", "deno", "node"];

/**
 * The narrowest Deno permissions the album service runs with: loopback only, the env names the
 * configuration reads (HOME among them: the home folder is read there, not asked of the system) and
 * undici (the photo service's client) reads, and with a Unix socket: read of the socket file, write
 * in its folder.
 */
function denoFlags(socketPath?: string): string[] {
  const net = socketPath ? `127.0.0.1,unix:${socketPath}` : "127.0.0.1";
  const flags = [`--allow-net=${net}`, `--allow-env=${[...envNames, ...UNDICI_ENV_NAMES].join(",")}`];
  // Write on the socket's folder: the adapter makes sure the folder exists before it listens.
  if (socketPath) flags.push(`--allow-read=${socketPath}`, `--allow-write=${dirname(socketPath)}`);
  return [...flags, "--unstable-no-legacy-abort"];
}

type AlbumOptions = { photosUrl?: string; socketPath?: string; env?: Record<string, string>; args?: string[] };

function startAlbum(runtime: RuntimeName, options: AlbumOptions = {}, ready?: RegExp[]): Promise<ServerProcess> {
  return startServer({
    runtime,
    runtimeArgs: runtime === "deno" ? denoFlags(options.socketPath) : [],
    env: {
      SERVICES: "album",
      ALBUM_HOST: "127.0.0.1",
      ALBUM_PORT: "0",
      ALBUM_SOCKET: options.socketPath,
      PHOTOS_API_BASE_URL: options.photosUrl,
      ...options.env,
    },
    args: options.args,
    ready: ready ?? [/album service listening on http:/, ...(options.socketPath ? [/album service listening on unix:/] : [])],
  });
}

const tcpOf = (server: ServerProcess): Target => {
  const port = /album service listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.output())?.[1];
  if (!port) throw new Error(`no port in:\n${server.output()}`);
  return { url: `http://127.0.0.1:${port}` };
};

/** An answer that holds each request until the test releases them all. */
function held(then: Answer) {
  const waiting: Parameters<Answer>[] = [];
  let arrivedCount = 0;
  const arrivals: (() => void)[] = [];
  const answer: Answer = (request, response) => {
    waiting.push([request, response]);
    arrivedCount++;
    for (const check of arrivals.splice(0)) check();
  };
  const arrived = (count: number) =>
    new Promise<void>((resolve) => {
      const check = () => (arrivedCount >= count ? resolve() : void arrivals.push(check));
      check();
    });
  const release = () => {
    for (const [request, response] of waiting.splice(0)) then(request, response);
  };
  return { answer, arrived, release };
}

/** The album's time limit on a photo service call, beyond any test's: a call it closes sooner was closed for another reason. */
const PHOTOS_TIMEOUT_MS = 300_000;

describe.each(runtimes)("the album service under %s", (runtime) => {
  let photos: PhotoService;
  let server: ServerProcess;
  let tcp: Target;

  beforeAll(async () => {
    photos = await startPhotoService();
    server = await startAlbum(runtime, { photosUrl: `${photos.url}/prefix/`, env: { PHOTOS_API_TIMEOUT_MS: String(PHOTOS_TIMEOUT_MS) } });
    tcp = tcpOf(server);
  });
  afterAll(async () => {
    await server?.stop();
    await photos?.close();
  });

  it("logs where it listens and which runtime runs it", () => {
    expect(server.output()).toMatch(new RegExp(`album service listening on http://127\\.0\\.0\\.1:\\d+ \\(${runtime} `));
  });

  it("answers an album over TCP, with 64-bit ids exact, after one call under the path prefix", async () => {
    photos.requests.length = 0;
    const ids = ["9007199254740993", "9223372036854775807", "-9223372036854775808"];
    photos.answerWith(json(photosJson(ids)));
    const answer = await ask(tcp, "GET", "/api/albums/-9223372036854775808?x=1");
    expect(answer.status).toBe(200);
    expect(answer.headers["content-type"]).toMatch(/^application\/json/);
    const body = parseExact(answer.body) as { albumId: string; photos: { id: string }[] };
    expect(body.albumId).toBe("-9223372036854775808");
    expect(body.photos.map((p) => p.id)).toEqual(ids);
    expect(photos.requests.map((r) => r.url)).toEqual(["/prefix/albums/-9223372036854775808/photos"]);
    expect(photos.requests[0]?.headers.accept).toBe("application/json");
  });

  it("passes an upstream error status on with an empty body", async () => {
    photos.answerWith(json(`{"oops":true}`, 503));
    expect(await ask(tcp, "GET", "/api/albums/1")).toMatchObject({ status: 503, body: "" });
  });

  it("answers 400, 404 and 405 as JSON without calling the photo service", async () => {
    photos.requests.length = 0;
    const bad = await ask(tcp, "GET", "/api/albums/1.5");
    expect([bad.status, JSON.parse(bad.body).error.code]).toEqual([400, "invalid_album_id"]);
    const missing = await ask(tcp, "GET", "/api/nothing");
    expect([missing.status, JSON.parse(missing.body).error.type]).toEqual([404, "not_found_error"]);
    const post = await ask(tcp, "POST", "/api/albums/1");
    expect([post.status, post.headers.allow]).toEqual([405, "GET"]);
    expect(photos.requests).toHaveLength(0);
  });

  it("aborts the call to the photo service when the client hangs up", async () => {
    let upstream!: { closed: Promise<string>; response: ServerResponse };
    const arrived = new Promise<void>((resolve) =>
      photos.answerWith((request, response) => {
        upstream = { closed: new Promise((closed) => request.socket.once("close", () => closed("closed"))), response };
        resolve();
      }),
    );
    const { request, answer } = call(tcp, "GET", "/api/albums/1");
    answer.catch(() => {}); // the hang-up below rejects it
    await arrived;
    request.destroy();
    // Waited for far less than the call's own time limit (PHOTOS_TIMEOUT_MS): only the hang-up can close it by then.
    const waited = new Promise<string>((resolve) => setTimeout(() => resolve("still open"), 30_000).unref());
    expect(await Promise.race([upstream.closed, waited])).toBe("closed");
    expect(upstream.response.headersSent).toBe(false); // cut while unanswered, not finished
    photos.answerWith(albumOf(1));
    expect((await ask(tcp, "GET", "/api/albums/2")).status).toBe(200); // and the service serves on
  });
});

describe.each(runtimes)("the album service under %s, stopping", (runtime) => {
  let photos: PhotoService;
  let folder: string;

  beforeAll(async () => {
    photos = await startPhotoService();
    folder = await mkdtemp(join(tmpdir(), "llamadock-album-"));
  });
  afterAll(async () => {
    await photos?.close();
    await rm(folder, { recursive: true, force: true });
  });

  it("serves a Unix socket; on SIGTERM finishes in-flight requests, then removes the socket file", async () => {
    const socketPath = join(folder, `${runtime}.sock`);
    const server = await startAlbum(runtime, { photosUrl: photos.url, socketPath });
    try {
      photos.answerWith(albumOf(2));
      expect(JSON.parse((await ask({ socketPath }, "GET", "/api/albums/3")).body).photos).toHaveLength(2);

      const slow = held(albumOf(2));
      photos.answerWith(slow.answer);
      const overSocket = ask({ socketPath }, "GET", "/api/albums/4");
      const overTcp = ask(tcpOf(server), "GET", "/api/albums/5");
      await slow.arrived(2);
      server.child.kill("SIGTERM");
      await server.waitForOutput(/SIGTERM received/);
      slow.release();
      expect(parseExact((await overSocket).body)).toMatchObject({ albumId: "4" });
      expect(parseExact((await overTcp).body)).toMatchObject({ albumId: "5" });
      expect(await server.exited).toBe(0);
      expect(existsSync(socketPath)).toBe(false);
    } finally {
      await server.stop();
    }
  });

  it("exits non-zero with a clear message when its port is in use", async () => {
    const squatter: Server = createServer();
    await new Promise<void>((resolve) => squatter.listen(0, "127.0.0.1", resolve));
    const { port } = squatter.address() as { port: number };
    try {
      const server = await startAlbum(runtime, { env: { ALBUM_PORT: String(port) } }, [/address already in use/]);
      expect(await server.exited).not.toBe(0);
      expect(server.output()).not.toMatch(/listening/);
    } finally {
      squatter.close();
    }
  });

  it("exits non-zero with a clear message when the base URL is malformed", async () => {
    const server = await startAlbum(runtime, { args: ["--photos.api.base-url=http//no-colon"] }, [/invalid configuration/]);
    expect(await server.exited).not.toBe(0);
    expect(server.output()).toMatch(/PHOTOS_API_BASE_URL/);
    expect(server.output()).not.toMatch(/listening/);
  });
});

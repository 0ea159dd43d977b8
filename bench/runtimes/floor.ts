/// <reference types="bun-types" />
import { Agent, request as httpRequest, createServer, type IncomingMessage, type ServerResponse } from "node:http";
// By its file: Bun answers the bare name with a stand-in over its own fetch (no Pool of its own).
import { Pool } from "undici/index.js";
import { callHeaders, streamed } from "./runner-call.ts";

// The floors of bench:runtimes: the least proxy each runtime can be, written the way that runtime
// does it fastest, and exactly-once like ours (never a second call on a reset reused connection).
// Run as FLOOR=album (TCP in, the photo service at PHOTOS_API_BASE_URL out: fetch the photos, wrap
// them) or FLOOR=inference (PROXY_SOCKET in, RUNNER_UPSTREAM_SOCKET out, the body passed as it is).
// - Node: node:http and an undici Pool (keep-alive; undici never resends a request), a stream's call
//   (Connection: close) through node:http's client, as ours sends it;
// - Deno: Deno.serve and, for the album, an undici Pool too (undici runs on Deno); for inference
//   node:http's client with a keep-alive Agent (Deno's fetch cannot send a path over a Unix socket);
// - Bun: Bun.serve and, for the album, an undici Pool (undici runs on Bun, loaded by its file);
//   for inference Bun's fetch with keep-alive, once more on a connection the runner closed, as
//   ours does.
// FLOOR_CLIENT=fetch gives Bun's and Deno's album floor the runtime's own fetch instead, keeping no
// idle connection (their fetch and node:http clients resend on a reset reused connection): the
// floor before undici was taken there, a TCP connect per call.
// Each passes on only the answer's status and type (ours drops the runner's connection headers),
// and sends a stream's request with `Connection: close`, as ours does: llama-server closes the
// connection after a stream anyway, and 16 streams at a time met such dead pooled connections
// twice in a row (the floor's one retry was not enough: 500s).

type DenoServe = (options: Record<string, unknown>, handler: (request: Request) => Response | Promise<Response>) => unknown;
declare const Deno: { serve: DenoServe; createHttpClient(options: { poolMaxIdlePerHost: number }): unknown } | undefined;

const kind = process.env.FLOOR ?? "album";
const base = process.env.PHOTOS_API_BASE_URL ?? "";
const runner = process.env.RUNNER_UPSTREAM_SOCKET ?? "";
const listenPath = process.env.PROXY_SOCKET ?? "";
const ownFetch = process.env.FLOOR_CLIENT === "fetch";
const runtime = "Bun" in globalThis ? "bun" : "Deno" in globalThis ? "deno" : "node";


const albumIdOf = (url: string) => url.slice(url.lastIndexOf("/") + 1);
const wrap = (albumId: string, photosText: string) => `{"albumId":${Number(albumId)},"photos":${JSON.stringify(JSON.parse(photosText))}}`;

function readAll(stream: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("end", () => resolve(Buffer.concat(chunks)));
    stream.on("error", reject);
  });
}

function announce(address: string): void {
  console.log(`${kind} floor (${runtime}${kind === "album" && runtime !== "node" ? (ownFetch ? ", own fetch" : ", undici") : ""}) listening on ${address}`);
}

function nodeListen(handler: (req: IncomingMessage, res: ServerResponse) => void): void {
  const server = createServer({ keepAliveTimeout: 5_000 }, handler);
  if (kind === "album") server.listen(0, "127.0.0.1", () => announce(`http://127.0.0.1:${(server.address() as { port: number }).port}`));
  else server.listen(listenPath, () => announce(`unix:${listenPath}`));
}

const albumPool = () => new Pool(base, { connections: 64 });

/** The album floor's call on an undici Pool: the photos' text. */
async function pooledPhotos(pool: Pool, albumId: string): Promise<string> {
  const upstream = await pool.request({ path: `/albums/${albumId}/photos`, method: "GET", headers: { accept: "application/json" } });
  return upstream.body.text();
}

function nodeFloor(): void {
  const pool = kind === "album" ? albumPool() : new Pool("http://runner", { socketPath: runner, connections: 64 });
  // A stream's call (Connection: close) through node:http's client, as ours sends it (src/runtime/node.ts):
  // undici makes and formats an Error for each connection it closes.
  const streams = new Agent();
  nodeListen(async (req, res) => {
    try {
      if (kind === "album") {
        const albumId = albumIdOf(req.url ?? "");
        res.writeHead(200, { "content-type": "application/json" }).end(wrap(albumId, await pooledPhotos(pool, albumId)));
      } else {
        const body = await readAll(req);
        const path = req.url ?? "/";
        if (streamed(body)) {
          const upstream = await nodeRunnerCall(streams, path, body);
          await passOn(res, upstream.statusCode ?? 502, upstream.headers["content-type"], upstream);
        } else {
          const upstream = await pool.request({ path, method: "POST", headers: callHeaders(body), body });
          await passOn(res, upstream.statusCode, upstream.headers["content-type"], upstream.body);
        }
      }
    } catch (error) {
      res.writeHead(502).end(String(error));
    }
  });
}

/** A runner's answer passed on as it comes, with its status and type only. */
async function passOn(res: ServerResponse, status: number, type: string | string[] | undefined, body: AsyncIterable<Uint8Array>): Promise<void> {
  res.writeHead(status, { "content-type": String(type ?? "application/json") });
  for await (const chunk of body) res.write(chunk);
  res.end();
}

/** `body` posted to the runner's `path` through node:http's client on `agent`. */
function nodeRunnerCall(agent: Agent, path: string, body: Uint8Array): Promise<IncomingMessage> {
  const options = { agent, socketPath: runner, method: "POST", path, headers: { ...callHeaders(body), "content-length": String(body.length) } };
  return new Promise((resolve, reject) => {
    const call = httpRequest(options, resolve);
    call.on("error", reject);
    call.end(body);
  });
}

/** ReadableStream.from (Deno has it; the DOM types here do not). */
const streamFrom = (source: AsyncIterable<Uint8Array>) => (ReadableStream as unknown as { from(source: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> }).from(source);

function denoFloor(serve: DenoServe): void {
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const client = Deno!.createHttpClient({ poolMaxIdlePerHost: 0 });
  const pool = kind === "album" && !ownFetch ? albumPool() : undefined;
  const photos = async (albumId: string) =>
    pool ? pooledPhotos(pool, albumId) : (await fetch(`${base}/albums/${albumId}/photos`, { headers: { accept: "application/json" }, client } as RequestInit)).text();
  const handler = async (request: Request): Promise<Response> => {
    if (kind === "album") {
      const albumId = albumIdOf(request.url);
      return new Response(wrap(albumId, await photos(albumId)), { headers: { "content-type": "application/json" } });
    }
    const body = new Uint8Array(await request.arrayBuffer());
    const path = new URL(request.url).pathname;
    const upstream = await nodeRunnerCall(agent, path, body);
    const type = upstream.headers["content-type"] ?? "application/json";
    // A stream is passed on as it comes (Deno's Response takes an async iterable); an answer whole.
    const answer = type.startsWith("text/event-stream") ? streamFrom(upstream) : await readAll(upstream);
    return new Response(answer as unknown as BodyInit, { status: upstream.statusCode, headers: { "content-type": type } });
  };
  if (kind === "album") serve({ hostname: "127.0.0.1", port: 0, onListen: ({ port }: { port: number }) => announce(`http://127.0.0.1:${port}`) }, handler);
  else serve({ path: listenPath, onListen: () => announce(`unix:${listenPath}`) }, handler);
}

function bunFloor(): void {
  const pool = kind === "album" && !ownFetch ? albumPool() : undefined;
  const photos = async (albumId: string) =>
    pool ? pooledPhotos(pool, albumId) : (await fetch(`${base}/albums/${albumId}/photos`, { headers: { accept: "application/json" }, keepalive: false })).text();
  const server = Bun.serve({
    ...(kind === "album" ? { hostname: "127.0.0.1", port: 0 } : { unix: listenPath }),
    idleTimeout: 0,
    async fetch(request: Request) {
      if (kind === "album") {
        const albumId = albumIdOf(request.url);
        return new Response(wrap(albumId, await photos(albumId)), { headers: { "content-type": "application/json" } });
      }
      const path = new URL(request.url).pathname;
      const body = await request.bytes();
      const call = () => fetch(`http://runner${path}`, { method: "POST", headers: callHeaders(body), body, unix: runner } as RequestInit);
      // Once more on a connection the runner had closed, as ours does (see forward.ts's send), and
      // once again: a new connection (each stream's) may find the runner's listen queue full
      // under load, a call it never read. Past those, a 502 that says why.
      let upstream: Response;
      try {
        upstream = await call().catch(call).catch(call);
      } catch (error) {
        return new Response(`floor: ${String(error)}`, { status: 502 });
      }
      // Only the type passed on, as ours drops the runner's connection headers: passed as they
      // came, they closed the client's connection after about one answer in ten (EPIPE, ECONNRESET).
      const type = upstream.headers.get("content-type") ?? "application/json";
      return new Response(upstream.body, { status: upstream.status, headers: { "content-type": type } });
    },
  } as unknown as Parameters<typeof Bun.serve>[0]);
  announce(kind === "album" ? `http://127.0.0.1:${server.port}` : `unix:${listenPath}`);
}

/**
 * FLOOR_SERVER=node-http, Deno's inference floor served through its node:http, as ours is there (for
 * the header deadline and the connection cap Deno.serve lacks): the least that path can cost.
 */
function denoNodeHttpFloor(): void {
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  nodeListen(async (req, res) => {
    try {
      const body = await readAll(req);
      const upstream = await nodeRunnerCall(agent, req.url ?? "/", body);
      await passOn(res, upstream.statusCode ?? 502, upstream.headers["content-type"], upstream);
    } catch (error) {
      res.writeHead(502).end(String(error));
    }
  });
}

if (runtime === "bun") bunFloor();
else if (runtime === "deno") (process.env.FLOOR_SERVER === "node-http" && kind === "inference" ? denoNodeHttpFloor() : denoFloor(Deno!.serve));
else nodeFloor();
// An orderly exit on SIGTERM, so that a profiler (--cpu-prof) writes what it saw.
process.once("SIGTERM", () => process.exit(0));

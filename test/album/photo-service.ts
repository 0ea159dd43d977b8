import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

// A stand-in for the external photo service: a real HTTP server on loopback whose answer each
// test chooses, and which records every request it receives.

export type Answer = (request: IncomingMessage, response: ServerResponse) => void;

export type ReceivedRequest = { method: string; url: string; headers: IncomingHttpHeaders };

export type PhotoService = {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  readonly url: string;
  readonly requests: ReceivedRequest[];
  /** Changes how the next requests are answered. */
  answerWith(answer: Answer): void;
  close(): Promise<void>;
};

/** A photo as the photo service sends it (jsonplaceholder's shape), as JSON text so ids stay exact. */
export const photoJson = (id: string, albumId = "1", extra = "") =>
  `{"albumId":${albumId},"id":${id},"title":"photo ${id}","url":"https://img.example/600/${id}",` +
  `"thumbnailUrl":"https://img.example/150/${id}"${extra}}`;

export const photosJson = (ids: string[], albumId = "1") => `[${ids.map((id) => photoJson(id, albumId)).join(",")}]`;

/** Answers `status` with `body` as JSON. */
export const json =
  (body: string, status = 200): Answer =>
  (_request, response) => {
    response.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    response.end(body);
  };

/** Answers a JSON array of photos `1..count` of the album the path names. */
export const albumOf =
  (count: number): Answer =>
  (request, response) => {
    const albumId = /\/albums\/([^/]+)\/photos$/.exec(request.url ?? "")?.[1] ?? "0";
    const ids = Array.from({ length: count }, (_, i) => String(i + 1));
    json(photosJson(ids, albumId))(request, response);
  };

/** Never answers; the connection stays open until the other side closes it. */
export const hang: Answer = () => {};

export async function startPhotoService(answer: Answer = albumOf(3)): Promise<PhotoService> {
  const requests: ReceivedRequest[] = [];
  let current = answer;
  const server = createServer((request, response) => {
    requests.push({ method: request.method ?? "", url: request.url ?? "", headers: request.headers });
    current(request, response);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    answerWith(next) {
      current = next;
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * A hostile photo service: answers 200 and streams photos without end (up to `upTo` bytes, a bound
 * on the test, never reached when the album service cuts the call), as fast as the other side
 * reads. `sent()` is what went out, `closed()` how many of its connections have closed.
 */
export function flood(options: { declaredLength?: number; upTo?: number } = {}) {
  const upTo = options.upTo ?? 2 ** 30;
  const chunk = Buffer.from(`${photoJson("1")},`.repeat(512));
  let sent = 0;
  let closed = 0;
  const answer: Answer = (request, response) => {
    request.socket.once("close", () => closed++);
    const length = options.declaredLength;
    response.writeHead(200, { "content-type": "application/json", ...(length === undefined ? {} : { "content-length": String(length) }) });
    const pump = () => {
      while (sent < upTo && !response.destroyed) {
        sent += chunk.byteLength;
        if (!response.write(chunk)) return void response.once("drain", pump);
      }
    };
    response.write("[");
    pump();
  };
  return { answer, sent: () => sent, closed: () => closed };
}

/**
 * `size` bytes of zeros, gzip-compressed (about a thousandth of their size): a body whose small
 * Content-Length says nothing of what it inflates to.
 */
export async function gzipBomb(size: number): Promise<Buffer> {
  const { createGzip } = await import("node:zlib");
  const gzip = createGzip({ level: 9 });
  const parts: Buffer[] = [];
  gzip.on("data", (part: Buffer) => parts.push(part));
  const done = new Promise((resolve) => gzip.once("end", resolve));
  const zeros = Buffer.alloc(1 << 20);
  for (let written = 0; written < size; written += zeros.byteLength) {
    if (!gzip.write(zeros)) await new Promise((resolve) => gzip.once("drain", resolve));
  }
  gzip.end();
  await done;
  return Buffer.concat(parts);
}

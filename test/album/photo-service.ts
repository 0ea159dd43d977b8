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

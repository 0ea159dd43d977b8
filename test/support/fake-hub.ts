import { createHash } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

// A loopback stand-in for the Hugging Face Hub: the file list API
// (`/api/models/<repo>/tree/main`, with LFS sha256s) and downloads (`/<repo>/resolve/main/<file>`,
// with Range), optionally behind a token, and optionally redirected (302) to a CDN path here that
// needs no token, as the Hub does. Repository ids match case-insensitively, as on the Hub.

export type HubRepo = Record<string, Uint8Array>;

export type FakeHub = {
  url: string;
  /** `METHOD path range?` of every request. */
  requests: string[];
  /** Those of them that carried an Authorization header. */
  withToken: string[];
  stop(): Promise<void>;
};

function treeOf(files: HubRepo) {
  return Object.entries(files).map(([path, data]) => ({
    type: "file",
    oid: createHash("sha1").update(data).digest("hex"),
    size: data.byteLength,
    path,
    lfs: { oid: createHash("sha256").update(data).digest("hex"), size: data.byteLength, pointerSize: 134 },
  }));
}

function sendFile(response: ServerResponse, data: Uint8Array, range: string | undefined) {
  const [, from, to] = /^bytes=(\d+)-(\d*)$/.exec(range ?? "") ?? [];
  if (from !== undefined) {
    const start = Number(from);
    const end = to ? Math.min(Number(to) + 1, data.byteLength) : data.byteLength;
    response.writeHead(206, { "content-range": `bytes ${start}-${end - 1}/${data.byteLength}`, "content-length": end - start });
    response.end(data.subarray(start, end));
    return;
  }
  response.writeHead(200, { "content-length": data.byteLength }).end(data);
}

export async function startFakeHub(repos: Record<string, HubRepo>, options: { token?: string; cdn?: boolean } = {}): Promise<FakeHub> {
  const byId = new Map(Object.entries(repos).map(([id, files]) => [id.toLowerCase(), files]));
  const requests: string[] = [];
  const withToken: string[] = [];
  let port = 0;
  const server = createServer((request, response) => {
    const path = decodeURIComponent(new URL(request.url ?? "/", "http://hub").pathname);
    const line = `${request.method} ${path}${request.headers.range ? ` ${request.headers.range}` : ""}`;
    requests.push(line);
    if (request.headers.authorization) withToken.push(line);
    const cdn = /^\/cdn(\/.+)$/.exec(path)?.[1];
    if (!cdn && options.token && request.headers.authorization !== `Bearer ${options.token}`) {
      response.writeHead(401, { "content-type": "application/json" }).end('{"error":"Invalid credentials"}');
      return;
    }
    const tree = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/main$/.exec(path);
    const file = /^\/([^/]+\/[^/]+)\/resolve\/main\/(.+)$/.exec(cdn ?? path);
    const repo = byId.get((tree?.[1] ?? file?.[1] ?? "").toLowerCase());
    if (repo && tree) {
      response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(treeOf(repo)));
    } else if (repo && file && repo[file[2]!] && options.cdn && !cdn) {
      // Another origin (`localhost`, not `127.0.0.1`), as the Hub's CDN is.
      response.writeHead(302, { location: `http://localhost:${port}/cdn${request.url}` }).end();
    } else if (repo && file && repo[file[2]!]) {
      sendFile(response, repo[file[2]!]!, request.headers.range);
    } else {
      response.writeHead(404, { "content-type": "application/json" }).end('{"error":"Repository not found"}');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    withToken,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

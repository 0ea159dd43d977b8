import { createHash } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

// A loopback stand-in for the Hugging Face Hub: the file list API
// (`/api/models/<repo>/tree/main`, with LFS sha256s) and downloads (`/<repo>/resolve/main/<file>`,
// with Range), optionally behind a token. Repository ids match case-insensitively, as on the Hub.

export type HubRepo = Record<string, Uint8Array>;

export type FakeHub = { url: string; requests: string[]; stop(): Promise<void> };

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
  const start = Number(/^bytes=(\d+)-$/.exec(range ?? "")?.[1] ?? 0);
  if (start > 0) {
    response.writeHead(206, { "content-range": `bytes ${start}-${data.byteLength - 1}/${data.byteLength}`, "content-length": data.byteLength - start });
    response.end(data.subarray(start));
    return;
  }
  response.writeHead(200, { "content-length": data.byteLength }).end(data);
}

export async function startFakeHub(repos: Record<string, HubRepo>, options: { token?: string } = {}): Promise<FakeHub> {
  const byId = new Map(Object.entries(repos).map(([id, files]) => [id.toLowerCase(), files]));
  const requests: string[] = [];
  const server = createServer((request, response) => {
    const path = decodeURIComponent(new URL(request.url ?? "/", "http://hub").pathname);
    requests.push(`${request.method} ${path}${request.headers.range ? ` ${request.headers.range}` : ""}`);
    if (options.token && request.headers.authorization !== `Bearer ${options.token}`) {
      response.writeHead(401, { "content-type": "application/json" }).end('{"error":"Invalid credentials"}');
      return;
    }
    const tree = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/main$/.exec(path);
    const file = /^\/([^/]+\/[^/]+)\/resolve\/main\/(.+)$/.exec(path);
    const repo = byId.get((tree?.[1] ?? file?.[1] ?? "").toLowerCase());
    if (repo && tree) {
      response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(treeOf(repo)));
    } else if (repo && file && repo[file[2]!]) {
      sendFile(response, repo[file[2]!]!, request.headers.range);
    } else {
      response.writeHead(404, { "content-type": "application/json" }).end('{"error":"Repository not found"}');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

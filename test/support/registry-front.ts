import { randomBytes } from "node:crypto";
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

// A loopback HTTP front for the real registry, standing in for what tests cannot get from
// docker-registry alone: a token service (the `WWW-Authenticate: Bearer realm=…` flow, as Docker
// Hub does), a connection cut in the middle of a blob, a blob whose bytes are corrupted, a CDN
// that blob GETs are redirected to, a server that ignores Range, and a bandwidth cap on each
// connection (a WAN path). Everything else is forwarded to the registry as is.

export type FrontOptions = {
  /** Require a bearer token from our `/token` realm; with credentials, the realm asks for them. */
  token?: { credentials?: { username: string; password: string }; accepted?: string[] };
  /** Cut the connection after this many body bytes of the first GET of each blob. */
  cutBlobsAfter?: number;
  /** Send this many body bytes of every GET of a blob, then hold the connection open, sending nothing. */
  stallBlobsAfter?: number;
  /** Flip a byte in every GET of this blob. */
  corruptBlob?: string;
  /** Answer blob GETs with a 307 to `/cdn/<same path>` here, which serves them (as a CDN would). */
  redirectBlobs?: boolean;
  /** Drop the Range header, so that every blob GET gets the whole blob (200). */
  ignoreRange?: boolean;
  /** Send at most this many bytes per second on each connection. */
  bytesPerSecond?: number;
  /** Answer every write (POST, PUT, PATCH, DELETE) 403 DENIED, as a registry does to credentials that may only pull. */
  denyWrites?: boolean;
};

export type Front = {
  host: string;
  url: string;
  /** `METHOD path range?` of every request forwarded to the registry. */
  requests: string[];
  /** Blob GETs whose client went away before the body ended. */
  abandoned: string[];
  /** Tokens the realm handed out. */
  tokens: string[];
  /** Body bytes of GETs of this blob sent so far (to clients still connected). */
  blobBytes(digest: string): number;
  /** Blob GETs being answered now, and the most there were at once. */
  blobGets(): { now: number; peak: number };
  stop(): Promise<void>;
};

function tokenRealm(request: IncomingMessage, response: ServerResponse, options: FrontOptions, tokens: string[]) {
  const wanted = options.token?.credentials;
  const expected = wanted && `Basic ${Buffer.from(`${wanted.username}:${wanted.password}`).toString("base64")}`;
  if (expected && request.headers.authorization !== expected) {
    response.writeHead(401, { "content-type": "application/json" }).end('{"errors":[{"code":"UNAUTHORIZED"}]}');
    return;
  }
  const token = randomBytes(16).toString("hex");
  tokens.push(token);
  response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ token, expires_in: 300 }));
}

function challenge(response: ServerResponse, url: string, path: string) {
  const repository = /^\/v2\/(.+?)\/(?:manifests|blobs)\//.exec(path)?.[1] ?? "";
  response
    .writeHead(401, {
      "content-type": "application/json",
      "www-authenticate": `Bearer realm="${url}/token",service="test-registry",scope="repository:${repository}:pull"`,
    })
    .end('{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}');
}

export async function startRegistryFront(registryUrl: string, options: FrontOptions = {}): Promise<Front> {
  const upstream = new URL(registryUrl);
  const requests: string[] = [];
  const abandoned: string[] = [];
  const tokens: string[] = [...(options.token?.accepted ?? [])];
  const cut = new Set<string>();
  let url = "";
  const blobBytes = new Map<string, number>();
  const gets = { now: 0, peak: 0 };
  // When each connection may send its next byte, for the bandwidth cap.
  const nextSend = new WeakMap<object, number>();

  /** Pauses `answer` for as long as `bytes` take on this connection at the cap. */
  function throttle(answer: IncomingMessage, response: ServerResponse, bytes: number) {
    if (!options.bytesPerSecond) return;
    const now = performance.now();
    const at = Math.max(now, nextSend.get(response.socket!) ?? now) + (bytes / options.bytesPerSecond) * 1000;
    nextSend.set(response.socket!, at);
    if (at - now < 1) return;
    answer.pause();
    setTimeout(() => answer.resume(), at - now);
  }

  function forward(request: IncomingMessage, response: ServerResponse) {
    const asked = request.url ?? "/";
    requests.push(`${request.method} ${asked}${request.headers.range ? ` ${request.headers.range}` : ""}`);
    const path = asked.startsWith("/cdn/") ? asked.slice("/cdn".length) : asked;
    const headers = { ...request.headers, host: upstream.host };
    delete headers.authorization;
    if (options.ignoreRange) delete headers.range;
    const blob = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(path)?.[1];
    const proxied = httpRequest({ host: upstream.hostname, port: upstream.port, method: request.method, path, headers }, (answer) => {
      response.writeHead(answer.statusCode ?? 502, answer.headers);
      const cutAfter = blob && request.method === "GET" && options.cutBlobsAfter !== undefined && !cut.has(blob) ? options.cutBlobsAfter : undefined;
      if (blob && cutAfter !== undefined) cut.add(blob);
      let sent = 0;
      const counted = blob !== undefined && request.method === "GET";
      if (counted) gets.peak = Math.max(gets.peak, ++gets.now);
      // Over once its last byte is sent (before the client can ask again), or once the client has gone.
      let open = counted;
      const over = () => {
        if (open) gets.now -= 1;
        open = false;
      };
      response.on("close", () => {
        over();
        if (blob && !response.writableFinished) abandoned.push(blob);
        answer.destroy();
      });
      answer.on("data", (chunk: Buffer) => {
        if (blob && options.stallBlobsAfter !== undefined && sent + chunk.length >= options.stallBlobsAfter) {
          response.write(chunk.subarray(0, Math.max(0, options.stallBlobsAfter - sent)));
          sent = options.stallBlobsAfter;
          answer.destroy();
          return;
        }
        let data = chunk;
        if (blob && blob === options.corruptBlob && sent === 0) {
          data = Buffer.from(chunk);
          data[0] = data[0]! ^ 0xff;
        }
        if (cutAfter !== undefined && sent + data.length >= cutAfter) {
          // Ends the connection a moment after the bytes left, so the client has read them.
          response.write(data.subarray(0, Math.max(0, cutAfter - sent)), () => setTimeout(() => response.socket?.end(), 200));
          answer.destroy();
          sent = cutAfter;
          return;
        }
        sent += data.length;
        if (response.destroyed) return;
        if (counted) blobBytes.set(blob, (blobBytes.get(blob) ?? 0) + data.length);
        response.write(data);
        throttle(answer, response, data.length);
      });
      answer.on("end", () => {
        over();
        response.end();
      });
    });
    proxied.on("error", () => response.socket?.destroy());
    request.pipe(proxied);
  }

  const server = createServer((request, response) => {
    const path = request.url ?? "/";
    if (path.startsWith("/token")) return tokenRealm(request, response, options, tokens);
    if (options.token && !path.startsWith("/cdn/")) {
      const given = /^Bearer (.+)$/.exec(request.headers.authorization ?? "")?.[1];
      if (!given || !tokens.includes(given)) return challenge(response, url, path);
    }
    if (options.denyWrites && request.method !== "GET" && request.method !== "HEAD") {
      requests.push(`${request.method} ${path} denied`);
      response.writeHead(403, { "content-type": "application/json" }).end('{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}');
      return;
    }
    if (options.redirectBlobs && request.method === "GET" && /^\/v2\/.+\/blobs\/sha256:[0-9a-f]{64}$/.test(path)) {
      requests.push(`GET ${path}${request.headers.range ? ` ${request.headers.range}` : ""}`);
      response.writeHead(307, { location: `${url}/cdn${path}` }).end();
      return;
    }
    forward(request, response);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  url = `http://${host}`;
  return {
    host,
    url,
    requests,
    abandoned,
    tokens,
    blobBytes: (digest) => blobBytes.get(digest) ?? 0,
    blobGets: () => ({ ...gets }),
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

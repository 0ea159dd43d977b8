import { randomBytes } from "node:crypto";
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

// A loopback HTTP front for the real registry, standing in for what tests cannot get from
// docker-registry alone: a token service (the `WWW-Authenticate: Bearer realm=…` flow, as Docker
// Hub does), a connection cut in the middle of a blob, and a blob whose bytes are corrupted.
// Everything else is forwarded to the registry as is.

export type FrontOptions = {
  /** Require a bearer token from our `/token` realm; with credentials, the realm asks for them. */
  token?: { credentials?: { username: string; password: string }; accepted?: string[] };
  /** Cut the connection after this many body bytes of the first GET of each blob. */
  cutBlobsAfter?: number;
  /** Send this many body bytes of every GET of a blob, then hold the connection open, sending nothing. */
  stallBlobsAfter?: number;
  /** Flip a byte in every GET of this blob. */
  corruptBlob?: string;
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

  function forward(request: IncomingMessage, response: ServerResponse) {
    const path = request.url ?? "/";
    requests.push(`${request.method} ${path}${request.headers.range ? ` ${request.headers.range}` : ""}`);
    const headers = { ...request.headers, host: upstream.host };
    delete headers.authorization;
    const blob = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(path)?.[1];
    const proxied = httpRequest({ host: upstream.hostname, port: upstream.port, method: request.method, path, headers }, (answer) => {
      response.writeHead(answer.statusCode ?? 502, answer.headers);
      const cutAfter = blob && request.method === "GET" && options.cutBlobsAfter !== undefined && !cut.has(blob) ? options.cutBlobsAfter : undefined;
      if (blob && cutAfter !== undefined) cut.add(blob);
      let sent = 0;
      response.on("close", () => {
        if (blob && !response.writableFinished) abandoned.push(blob);
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
        response.write(data);
      });
      answer.on("end", () => response.end());
    });
    proxied.on("error", () => response.socket?.destroy());
    request.pipe(proxied);
  }

  const server = createServer((request, response) => {
    const path = request.url ?? "/";
    if (path.startsWith("/token")) return tokenRealm(request, response, options, tokens);
    if (options.token) {
      const given = /^Bearer (.+)$/.exec(request.headers.authorization ?? "")?.[1];
      if (!given || !tokens.includes(given)) return challenge(response, url, path);
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
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { parseReference } from "../../src/models/index.ts";
import { authorize, parseChallenge } from "../../src/models/registry/auth.ts";
import { openRepository } from "../../src/models/registry/client.ts";
import { modelApi, pull, type ModelApi } from "./helpers.ts";

// A registry or token service that misbehaves at the network level, played by loopback HTTP
// servers: each failure must become one of our errors (401 or an upstream failure, 502), not a 500
// that names nothing.

type Handle = (request: IncomingMessage, response: ServerResponse) => void;

const servers: Server[] = [];
let api: ModelApi | undefined;
afterEach(async () => {
  await api?.dispose();
  api = undefined;
  await Promise.all(
    servers.splice(0).map((server) => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    }),
  );
});

async function serve(handle: Handle): Promise<string> {
  const server = createServer(handle);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A port nobody listens on: a server's, once closed. */
async function closedPort(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `127.0.0.1:${port}`;
}

/** Promises 1000 bytes, sends 10, then resets the connection. */
const cutBody: Handle = (_request, response) => {
  response.writeHead(200, { "content-type": "application/json", "content-length": "1000" });
  response.write('{"token":"', () => setTimeout(() => response.socket?.resetAndDestroy(), 50));
};

const tokenFor = (realm: string) =>
  authorize({
    challenge: parseChallenge(`Bearer realm="${realm}",service="s"`)!,
    scope: "repository:ai/tiny:pull",
    fetch: globalThis.fetch.bind(globalThis),
    signal: new AbortController().signal,
  });

async function expectHttpError(promise: Promise<unknown>, status: number, type: string) {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(HttpError);
  expect(error).toMatchObject({ status, type });
}

describe("registry token flow failures (B6: they surfaced as 500 internal_error)", () => {
  it("a realm that is not a URL is an upstream failure", async () => {
    await expectHttpError(tokenFor("not a url"), 502, "upstream_error");
  });

  it("an unreachable realm is an upstream failure", async () => {
    await expectHttpError(tokenFor(`http://${await closedPort()}/token`), 502, "upstream_error");
  });

  it("a realm that answers something other than JSON gave no token: 401", async () => {
    const host = await serve((_request, response) => response.writeHead(200, { "content-type": "text/html" }).end("<html>"));
    await expectHttpError(tokenFor(`http://${host}/token`), 401, "authentication_error");
  });

  it("a realm that resets the connection mid-answer is an upstream failure", async () => {
    const host = await serve(cutBody);
    await expectHttpError(tokenFor(`http://${host}/token`), 502, "upstream_error");
  });

  it("a pull whose registry names an unreachable realm answers upstream_error", async () => {
    const realm = `http://${await closedPort()}/token`;
    const registry = await serve((_request, response) =>
      response.writeHead(401, { "www-authenticate": `Bearer realm="${realm}",service="s"` }).end(),
    );
    api = await modelApi();
    const answer = await pull(api.handler, { from: `${registry}/ai/tiny` });
    expect(answer.status).toBe(502);
    expect(answer.json.error).toMatchObject({ type: "upstream_error", code: "pull_failed" });
  });
});

describe("registry answers cut mid-body (B6: a connection reset raised a raw error)", () => {
  const options = { fetch: globalThis.fetch.bind(globalThis), insecureHosts: [], credentials: {} };
  const signal = () => new AbortController().signal;

  it("a manifest is an upstream failure", async () => {
    const host = await serve(cutBody);
    const repository = openRepository(parseReference(`${host}/ai/tiny`), options);
    await expectHttpError(repository.manifest(signal()), 502, "upstream_error");
  });

  it("a config blob is an upstream failure", async () => {
    const host = await serve(cutBody);
    const repository = openRepository(parseReference(`${host}/ai/tiny`), options);
    const descriptor = { mediaType: "application/json", digest: `sha256:${"c".repeat(64)}`, size: 1000 };
    await expectHttpError(repository.blob(descriptor, signal()), 502, "upstream_error");
  });
});

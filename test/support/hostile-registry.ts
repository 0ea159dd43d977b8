import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { MODEL_MEDIA, sha256 } from "./registry.ts";

// A registry that misbehaves on purpose, on loopback. It speaks enough of the OCI distribution API
// to be pulled from (`GET /v2/`, manifests by tag or digest, blobs with Range, a token realm), and
// on demand sends a manifest that never ends or that declares a huge length, stops sending in the
// middle of an answer, never answers at all, holds a blob back until the test lets it go, sends a
// blob longer than its descriptor or with other bytes, or leaves its token realm unanswered.
// Its misbehaviour can be changed between pulls, so that a test can heal it and pull again.

export type Artifact = {
  repository: string;
  tag: string;
  manifest: Uint8Array;
  manifestDigest: string;
  weights: { digest: string; size: number };
  config: { digest: string; size: number };
  blobs: Map<string, Uint8Array>;
};

export type ArtifactOptions = {
  /** The config blob's bytes (default: a small valid config). */
  config?: Uint8Array;
  /** The config size the manifest declares (default: the real one). */
  configSize?: number;
};

/** A Docker model artifact: one GGUF layer and a config, with the manifest that names them. */
export function modelArtifact(repository: string, tag: string, weights: Uint8Array, options: ArtifactOptions = {}): Artifact {
  const config = options.config ?? new TextEncoder().encode(JSON.stringify({ config: { format: "gguf" }, descriptor: {} }));
  const layer = { digest: sha256(weights), size: weights.byteLength };
  const configDescriptor = { digest: sha256(config), size: options.configSize ?? config.byteLength };
  const manifest = new TextEncoder().encode(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MODEL_MEDIA.manifest,
      config: { mediaType: MODEL_MEDIA.config, ...configDescriptor },
      layers: [{ mediaType: MODEL_MEDIA.gguf, ...layer }],
    }),
  );
  return {
    repository,
    tag,
    manifest,
    manifestDigest: sha256(manifest),
    weights: layer,
    config: configDescriptor,
    blobs: new Map([
      [layer.digest, weights],
      [configDescriptor.digest, config],
    ]),
  };
}

export type BlobMisbehaviour = {
  /** Send this many bytes of the answer, then nothing, holding the connection open. */
  stallAfter?: number;
  /** Send the answer at this many bytes per second (a slow link), a tenth of it every 100 ms. */
  bytesPerSecond?: number;
  /** Send nothing until this settles. */
  hold?: Promise<void>;
  /** Send this many bytes of junk (spaces) after the blob's last byte (no length declared). */
  extra?: number;
  /** Send these bytes instead of the blob's. */
  replace?: Uint8Array;
};

export type Misbehaviour = {
  /**
   * `endless`: a manifest without a declared length that never ends (it stops at `endlessBytes`);
   * `declared-huge`: a Content-Length of 1 GiB; `stall`: a few bytes, then nothing; `silent`: no
   * answer at all.
   */
  manifest?: "endless" | "declared-huge" | "stall" | "silent";
  blobs?: Record<string, BlobMisbehaviour>;
  /** Every registry request asks for a bearer token from our realm, which never answers. */
  hangingRealm?: boolean;
};

export type HostileRegistry = {
  host: string;
  url: string;
  /** `METHOD path range?` of every request, in arrival order. */
  requests: string[];
  /** What it does wrong now; tests may change it between pulls. */
  misbehaviour: Misbehaviour;
  /** Body bytes written so far, over every answer. */
  sent(): number;
  /** Digests of the blob answers whose client went away before the answer ended. */
  abandoned: string[];
  add(artifact: Artifact): void;
  stop(): Promise<void>;
};

// Bounds the "endless" manifest so that a client with no limit fails a test instead of the machine.
const ENDLESS_BYTES = 512 << 20;
const CHUNK = Buffer.alloc(64 << 10, 0x20);

function drainedOrClosed(response: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      response.off("drain", done).off("close", done);
      resolve();
    };
    response.on("drain", done).on("close", done);
  });
}

export async function startHostileRegistry(misbehaviour: Misbehaviour = {}): Promise<HostileRegistry> {
  const artifacts: Artifact[] = [];
  const requests: string[] = [];
  const abandoned: string[] = [];
  let sent = 0;
  let url = "";

  /** Writes `data`, waiting while the socket is full; false once the client has gone. */
  async function write(response: ServerResponse, data: Uint8Array): Promise<boolean> {
    if (response.destroyed) return false;
    sent += data.byteLength;
    if (!response.write(data)) await drainedOrClosed(response);
    return !response.destroyed;
  }

  /** Writes `bytes` spaces, a chunk at a time, so that this server's own memory stays flat. */
  async function padding(response: ServerResponse, bytes: number): Promise<boolean> {
    for (let left = bytes; left > 0; left -= CHUNK.byteLength) {
      if (!(await write(response, CHUNK.subarray(0, Math.min(left, CHUNK.byteLength))))) return false;
    }
    return true;
  }

  /** Writes `data` a tenth of `perSecond` every 100 ms; false once the client has gone. */
  async function trickle(response: ServerResponse, data: Uint8Array, perSecond: number): Promise<boolean> {
    const step = Math.max(1, Math.floor(perSecond / 10));
    for (let at = 0; at < data.byteLength; at += step) {
      if (at > 0) await new Promise((resolve) => setTimeout(resolve, 100));
      if (!(await write(response, data.subarray(at, at + step)))) return false;
    }
    return true;
  }

  async function endless(response: ServerResponse): Promise<void> {
    response.writeHead(200, { "content-type": MODEL_MEDIA.manifest });
    if (!(await write(response, Buffer.from('{"schemaVersion":2,"padding":"')))) return;
    if (await padding(response, ENDLESS_BYTES)) response.end('"}');
  }

  function manifest(response: ServerResponse, artifact: Artifact): void {
    const mode = state.misbehaviour.manifest;
    if (mode === "silent") return;
    if (mode === "endless") return void endless(response);
    const declared = mode === "declared-huge" ? String(1 << 30) : String(artifact.manifest.byteLength);
    response.writeHead(200, { "content-type": MODEL_MEDIA.manifest, "content-length": declared });
    if (mode === "stall") return void write(response, artifact.manifest.subarray(0, 10));
    if (mode === "declared-huge") return void write(response, artifact.manifest);
    sent += artifact.manifest.byteLength;
    response.end(artifact.manifest);
  }

  async function blob(request: IncomingMessage, response: ServerResponse, digest: string, data: Uint8Array): Promise<void> {
    const wrong = state.misbehaviour.blobs?.[digest] ?? {};
    await wrong.hold;
    const start = Number(/^bytes=(\d+)-$/.exec(request.headers.range ?? "")?.[1] ?? 0);
    const body = (wrong.replace ?? data).subarray(start);
    const headers: Record<string, string> = { "content-type": "application/octet-stream" };
    if (wrong.extra === undefined) headers["content-length"] = String(body.byteLength);
    if (start > 0) headers["content-range"] = `bytes ${start}-${data.byteLength - 1}/${data.byteLength}`;
    response.writeHead(start > 0 ? 206 : 200, headers);
    response.once("close", () => {
      if (!response.writableFinished) abandoned.push(digest);
    });
    if (wrong.stallAfter !== undefined) return void write(response, body.subarray(0, wrong.stallAfter));
    if (!(await (wrong.bytesPerSecond ? trickle(response, body, wrong.bytesPerSecond) : write(response, body)))) return;
    if (await padding(response, wrong.extra ?? 0)) response.end();
  }

  function challenge(response: ServerResponse): void {
    response
      .writeHead(401, { "content-type": "application/json", "www-authenticate": `Bearer realm="${url}/token",service="hostile"` })
      .end('{"errors":[{"code":"UNAUTHORIZED"}]}');
  }

  function handle(request: IncomingMessage, response: ServerResponse): void {
    const path = request.url ?? "/";
    requests.push(`${request.method} ${path}${request.headers.range ? ` ${request.headers.range}` : ""}`);
    if (path.startsWith("/token")) return; // never answered: only a hanging realm sends clients here
    if (path === "/v2/" || path === "/v2") return void response.writeHead(200, { "content-type": "application/json" }).end("{}");
    if (state.misbehaviour.hangingRealm && !request.headers.authorization) return challenge(response);
    const route = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(path);
    const [repository, kind, target] = route ? [route[1]!, route[2]!, route[3]!] : [];
    const mine = artifacts.filter((a) => a.repository === repository);
    const named = mine.find((a) => a.tag === target || a.manifestDigest === target);
    if (named && kind === "manifests") return manifest(response, named);
    const data = kind === "blobs" && target ? mine.find((a) => a.blobs.has(target))?.blobs.get(target) : undefined;
    if (data && target) return void blob(request, response, target, data);
    response.writeHead(404, { "content-type": "application/json" }).end('{"errors":[{"code":"NOT_FOUND"}]}');
  }

  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  url = `http://${host}`;
  const state: HostileRegistry = {
    host,
    url,
    requests,
    abandoned,
    misbehaviour,
    sent: () => sent,
    add: (artifact) => void artifacts.push(artifact),
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return state;
}

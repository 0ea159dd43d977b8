import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { watch, type ServerProcess } from "./server-process.ts";

// A real OCI registry for tests: the Debian `docker-registry` (CNCF distribution) on loopback,
// with its storage in a temporary folder, and a push of Docker model artifacts written per the
// OCI distribution spec (blob upload POST then PUT, manifest PUT).

export const REGISTRY_BINARY = "/usr/bin/docker-registry";

export const MODEL_MEDIA = {
  manifest: "application/vnd.oci.image.manifest.v1+json",
  config: "application/vnd.docker.ai.model.config.v0.1+json",
  gguf: "application/vnd.docker.ai.gguf.v3",
  mmproj: "application/vnd.docker.ai.mmproj",
  license: "application/vnd.docker.ai.license",
};

/** `storage`: the folder its blobs are kept in (tests that tamper with what it serves write there). */
export type Registry = { host: string; url: string; process: ServerProcess; storage: string; stop(): Promise<void> };

export async function freePort(host = "127.0.0.1"): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (typeof address !== "object" || !address) throw new Error("no port");
  return address.port;
}

async function waitUntilUp(url: string, process: ServerProcess): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt += 1) {
    if (process.child.exitCode !== null) throw new Error(`docker-registry exited:\n${process.output()}`);
    const ok = await fetch(`${url}/v2/`).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`docker-registry did not answer on ${url}:\n${process.output()}`);
}

/**
 * Starts `docker-registry`, storing under a new temporary folder: on 127.0.0.1 at a free port, or on
 * `address`, a local one (a container bridge's gateway, for containers on this host), at `port`.
 */
export async function startRegistry(address = "127.0.0.1", port?: number): Promise<Registry> {
  const dir = await mkdtemp(join(tmpdir(), "llamadock-registry-"));
  port ??= await freePort(address);
  const host = `${address}:${port}`;
  const config = [
    "version: 0.1",
    "log:",
    "  level: error",
    "  accesslog:",
    "    disabled: true",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${join(dir, "storage")}`,
    "  delete:",
    "    enabled: true",
    "http:",
    `  addr: ${host}`,
    "  secret: test-only-secret",
  ].join("\n");
  await writeFile(join(dir, "config.yml"), `${config}\n`);
  const child = spawn(REGISTRY_BINARY, ["serve", join(dir, "config.yml")], { stdio: ["ignore", "pipe", "pipe"] });
  const process = watch(child);
  const url = `http://${host}`;
  try {
    await waitUntilUp(url, process);
  } catch (error) {
    await process.stop(1_000);
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    host,
    url,
    process,
    storage: join(dir, "storage"),
    async stop() {
      await process.stop(5_000);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export type BlobInput = Uint8Array | { path: string; size: number; digest: string };

export const sha256 = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;

function describeBlob(blob: BlobInput): { digest: string; size: number } {
  return blob instanceof Uint8Array ? { digest: sha256(blob), size: blob.byteLength } : { digest: blob.digest, size: blob.size };
}

/** Monolithic blob upload: POST opens an upload, PUT with `?digest=` sends the bytes. */
export async function pushBlob(registryUrl: string, repository: string, blob: BlobInput): Promise<{ digest: string; size: number }> {
  const { digest, size } = describeBlob(blob);
  const opened = await fetch(`${registryUrl}/v2/${repository}/blobs/uploads/`, { method: "POST" });
  if (opened.status !== 202) throw new Error(`upload POST answered ${opened.status}: ${await opened.text()}`);
  const location = new URL(opened.headers.get("location")!, registryUrl);
  location.searchParams.set("digest", digest);
  const body = blob instanceof Uint8Array ? blob : (Readable.toWeb(createReadStream(blob.path)) as unknown as ReadableStream<Uint8Array>);
  const put = await fetch(location, {
    method: "PUT",
    // A stream's length must be declared; a byte array's is known to fetch.
    headers: { "content-type": "application/octet-stream", ...(blob instanceof Uint8Array ? {} : { "content-length": String(size) }) },
    body,
    duplex: "half",
  } as RequestInit);
  if (put.status !== 201) throw new Error(`upload PUT answered ${put.status}: ${await put.text()}`);
  return { digest, size };
}

export type PushOptions = {
  configMediaType?: string;
  /** Extra layers (mmproj, license) pushed beside the weights. */
  layers?: { mediaType: string; data: Uint8Array }[];
  /** The `config` object of the artifact's config blob. */
  modelConfig?: Record<string, unknown>;
};

export type PushedModel = { manifestDigest: string; ggufDigest: string; configDigest: string; size: number; manifest: Uint8Array };

/** Pushes weights (and extra layers) as a Docker model artifact tagged `repository:tag`. */
export async function pushModel(
  registry: { url: string },
  repository: string,
  tag: string,
  gguf: BlobInput,
  options: PushOptions = {},
): Promise<PushedModel> {
  const weights = await pushBlob(registry.url, repository, gguf);
  const extra = [];
  for (const layer of options.layers ?? []) extra.push({ mediaType: layer.mediaType, ...(await pushBlob(registry.url, repository, layer.data)) });
  const configBytes = new TextEncoder().encode(
    JSON.stringify({
      config: { format: "gguf", ...options.modelConfig },
      descriptor: { created: "2026-01-02T03:04:05Z" },
      rootfs: { type: "rootfs", diff_ids: [weights.digest] },
    }),
  );
  const config = await pushBlob(registry.url, repository, configBytes);
  const manifest = new TextEncoder().encode(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MODEL_MEDIA.manifest,
      config: { mediaType: options.configMediaType ?? MODEL_MEDIA.config, ...config },
      layers: [{ mediaType: MODEL_MEDIA.gguf, ...weights }, ...extra],
    }),
  );
  const put = await fetch(`${registry.url}/v2/${repository}/manifests/${tag}`, {
    method: "PUT",
    headers: { "content-type": MODEL_MEDIA.manifest },
    body: manifest,
  });
  if (put.status !== 201) throw new Error(`manifest PUT answered ${put.status}: ${await put.text()}`);
  return { manifestDigest: sha256(manifest), ggufDigest: weights.digest, configDigest: config.digest, size: weights.size, manifest };
}

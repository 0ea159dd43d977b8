import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { lstat, mkdtemp, readdir, readlink, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import { fileBody } from "../models/file-body.ts";
import { parseReference } from "../models/reference.ts";
import { tarEnd, tarHeader, tarPadding } from "../models/package/tar.ts";
import { openDestination } from "../models/push/destination.ts";
import type { RegistryOptions } from "../models/registry/client.ts";
import { hostArch } from "./layout.ts";

// Publishing a llama-server build (the folder the setup builds: llama-server and its libraries) as
// an engine image: one gzip layer, an OCI image config, an OCI image manifest. Any llamadock then
// pulls it with `llamadock engine pull`. In llama.cpp's layout (the default), `app/llama-server`
// with its libraries beside it; in Docker Model Runner's, the binary as
// `com.docker.llama-server.native.linux.<variant>.<arch>/bin/com.docker.llama-server` and the
// libraries in its `lib/`. Links between the libraries (`libggml.so -> libggml.so.0`) stay links.

const LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip";
const CONFIG_TYPE = "application/vnd.oci.image.config.v1+json";
const MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json";

const digestOf = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;

export type PublishLayout = { kind: "llama.cpp" } | { kind: "docker-model-runner"; variant: string };

/** Where each file of the folder goes in the image: its path there. */
function placeOf(layout: PublishLayout): { dirs: string[]; place(name: string): string } {
  if (layout.kind === "llama.cpp") return { dirs: ["app/"], place: (name) => `app/${name}` };
  const root = `com.docker.llama-server.native.linux.${layout.variant}.${hostArch()}`;
  return { dirs: [`${root}/`, `${root}/bin/`, `${root}/lib/`], place: (name) => (name === "llama-server" ? `${root}/bin/com.docker.llama-server` : `${root}/lib/${name}`) };
}

/**
 * The folder as one tar in the layout, piece by piece: files with their modes (read as they are
 * sent, never whole: a CUDA build's libraries weigh a gigabyte), links as links, nothing else.
 */
async function* tarOf(folder: string, layout: PublishLayout): AsyncGenerator<Uint8Array> {
  const { dirs, place } = placeOf(layout);
  for (const dir of dirs) yield tarHeader(dir, 0, 0, { type: "5", mode: 0o755 });
  for (const name of (await readdir(folder)).sort()) {
    const path = join(folder, name);
    const stat = await lstat(path);
    if (stat.isSymbolicLink()) yield tarHeader(place(name), 0, 0, { type: "2", link: await readlink(path), mode: 0o777 });
    else if (stat.isFile()) {
      yield tarHeader(place(name), stat.size, 0, { mode: stat.mode & 0o777 });
      let sent = 0;
      // (an empty file is not read: a stream's `end` cannot say "no byte")
      if (stat.size > 0) for await (const chunk of createReadStream(path, { end: stat.size - 1 }) as AsyncIterable<Buffer>) {
        sent += chunk.byteLength;
        yield chunk;
      }
      if (sent !== stat.size) throw new Error(`${path} changed while it was published (${sent} bytes of ${stat.size})`);
      yield tarPadding(stat.size);
    }
  }
  yield tarEnd();
}

/** The layer gzipped into `file`, hashed and counted as it is written. */
async function gzipInto(tar: AsyncIterable<Uint8Array>, file: string): Promise<{ digest: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  const measure = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      size += chunk.byteLength;
      done(null, chunk);
    },
  });
  await pipeline(Readable.from(tar), createGzip(), measure, createWriteStream(file));
  return { digest: `sha256:${hash.digest("hex")}`, size };
}

export type Published = { reference: string; digest: string; layer: { digest: string; size: number } };

/** Pushes the build in `folder` to `reference` (`registry/namespace/name:tag`). */
export async function publishEngine(folder: string, reference: string, registry: RegistryOptions, layout: PublishLayout = { kind: "llama.cpp" }, signal = new AbortController().signal): Promise<Published> {
  const target = parseReference(reference);
  const scratch = await mkdtemp(join(tmpdir(), "llamadock-engine-"));
  try {
    const layerFile = join(scratch, "layer.tar.gz");
    const layerBlob = { ...(await gzipInto(tarOf(folder, layout), layerFile)), mediaType: LAYER_TYPE, body: () => fileBody(layerFile) };
    const entrypoint = `/${placeOf(layout).place("llama-server")}`;
    const config = new TextEncoder().encode(JSON.stringify({ architecture: hostArch(), os: "linux", config: { Entrypoint: [entrypoint] }, rootfs: { type: "layers", diff_ids: [] } }));
    const configBlob = { digest: digestOf(config), size: config.byteLength, mediaType: CONFIG_TYPE, body: (): ReadableStream<Uint8Array> => new Blob([config as BlobPart]).stream() };
    const destination = openDestination(target, registry);
    await destination.start(signal);
    try {
      for (const blob of [configBlob, layerBlob]) {
        if (await destination.hasBlob(blob.digest, signal)) continue;
        await destination.putBlob(blob, blob.body, signal);
      }
      const descriptor = (b: typeof configBlob) => ({ mediaType: b.mediaType, digest: b.digest, size: b.size });
      const manifest = new TextEncoder().encode(JSON.stringify({ schemaVersion: 2, mediaType: MANIFEST_TYPE, config: descriptor(configBlob), layers: [descriptor(layerBlob)] }));
      await destination.putManifest(manifest, signal);
      return { reference: target.key, digest: digestOf(manifest), layer: { digest: layerBlob.digest, size: layerBlob.size } };
    } finally {
      await destination.close();
    }
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

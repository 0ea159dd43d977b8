import { createHash } from "node:crypto";
import { lstat, readdir, readFile, readlink } from "node:fs/promises";
import { join } from "node:path";
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

/** The folder as one tar in the layout: files with their modes, links as links, nothing else. */
async function tarOf(folder: string, layout: PublishLayout): Promise<Uint8Array> {
  const { dirs, place } = placeOf(layout);
  const parts: Uint8Array[] = dirs.map((dir) => tarHeader(dir, 0, 0, { type: "5", mode: 0o755 }));
  for (const name of (await readdir(folder)).sort()) {
    const path = join(folder, name);
    const stat = await lstat(path);
    if (stat.isSymbolicLink()) parts.push(tarHeader(place(name), 0, 0, { type: "2", link: await readlink(path), mode: 0o777 }));
    else if (stat.isFile()) {
      const bytes = await readFile(path);
      parts.push(tarHeader(place(name), bytes.byteLength, 0, { mode: stat.mode & 0o777 }), bytes, tarPadding(bytes.byteLength));
    }
  }
  parts.push(tarEnd());
  return gzip(parts);
}

async function gzip(parts: Uint8Array[]): Promise<Uint8Array> {
  const stream = new Blob(parts as BlobPart[]).stream().pipeThrough(new CompressionStream("gzip") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>);
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

export type Published = { reference: string; digest: string; layer: { digest: string; size: number } };

/** Pushes the build in `folder` to `reference` (`registry/namespace/name:tag`). */
export async function publishEngine(folder: string, reference: string, registry: RegistryOptions, layout: PublishLayout = { kind: "llama.cpp" }, signal = new AbortController().signal): Promise<Published> {
  const target = parseReference(reference);
  const layer = await tarOf(folder, layout);
  const entrypoint = `/${placeOf(layout).place("llama-server")}`;
  const config = new TextEncoder().encode(JSON.stringify({ architecture: hostArch(), os: "linux", config: { Entrypoint: [entrypoint] }, rootfs: { type: "layers", diff_ids: [] } }));
  const blobs = [
    { bytes: config, mediaType: CONFIG_TYPE },
    { bytes: layer, mediaType: LAYER_TYPE },
  ].map((b) => ({ ...b, digest: digestOf(b.bytes), size: b.bytes.byteLength }));
  const destination = openDestination(target, registry);
  await destination.start(signal);
  try {
    for (const blob of blobs) {
      if (await destination.hasBlob(blob.digest, signal)) continue;
      await destination.putBlob(blob, () => new Blob([blob.bytes as BlobPart]).stream(), signal);
    }
    const [configBlob, layerBlob] = blobs as [(typeof blobs)[number], (typeof blobs)[number]];
    const descriptor = (b: typeof configBlob) => ({ mediaType: b.mediaType, digest: b.digest, size: b.size });
    const manifest = new TextEncoder().encode(JSON.stringify({ schemaVersion: 2, mediaType: MANIFEST_TYPE, config: descriptor(configBlob), layers: [descriptor(layerBlob)] }));
    await destination.putManifest(manifest, signal);
    return { reference: target.key, digest: digestOf(manifest), layer: { digest: layerBlob.digest, size: layerBlob.size } };
  } finally {
    await destination.close();
  }
}

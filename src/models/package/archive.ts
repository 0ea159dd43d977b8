import { createHash } from "node:crypto";
import { open, readdir, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { buildArtifact, type Artifact } from "../artifact.ts";
import { fileBody } from "../file-body.ts";
import { readGgufConfig } from "../gguf.ts";
import { MediaTypes } from "../registry/client.ts";
import { tarEnd, tarHeader, tarPadding } from "./tar.ts";

// A model packaged from local files as Docker Model Runner's `docker model package` does it: the
// artifact (GGUF weights, shards in their order, and an optional projector, chat template and
// licenses; a config read from the first weights file's GGUF header) and the archive that carries
// it to `POST /models/load`. The files are read twice (hashed, then sent), never held in memory.

export type PackageFiles = { weights: string[]; mmproj?: string; chatTemplate?: string; licenses?: string[] };

/** A file that cannot be packaged: missing, unreadable, or not the GGUF it must be. */
export class PackageError extends Error {}

type Layer = { path: string; mediaType: string; digest: string; size: number };

export type Package = {
  artifact: Artifact;
  layers: Layer[];
  /** Bytes of the whole archive. */
  size: number;
  /** The archive; `progress` hears each layer's bytes as they are read into it. */
  archive(progress?: (layer: Layer, current: number) => void): ReadableStream<Uint8Array>;
};

async function hashFile(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of fileBody(path) as unknown as AsyncIterable<Uint8Array>) hash.update(chunk);
  return `sha256:${hash.digest("hex")}`;
}

async function isGguf(path: string): Promise<boolean> {
  const file = await open(path, "r");
  try {
    const magic = new Uint8Array(4);
    await file.read(magic, 0, 4, 0);
    return new TextDecoder().decode(magic) === "GGUF";
  } finally {
    await file.close();
  }
}

async function layerOf(path: string, mediaType: string): Promise<Layer> {
  const info = await stat(path).catch(() => undefined);
  if (!info?.isFile()) throw new PackageError(`${path} is not a file`);
  if ((mediaType === MediaTypes.gguf || mediaType === MediaTypes.mmproj) && !(await isGguf(path))) {
    throw new PackageError(`${path} is not a GGUF file (it does not begin with "GGUF")`);
  }
  return { path, mediaType, digest: await hashFile(path), size: info.size };
}

const FIRST_SHARD = /^(.*)-00001-of-(\d{5})\.gguf$/;

/**
 * The weights as given, or, for the first file of a split model alone (`x-00001-of-00003.gguf`),
 * every file of it found beside it by llama.cpp's names, in order (as `docker model package`
 * takes a first shard). One missing is a PackageError naming it.
 */
export async function withShards(weights: string[]): Promise<string[]> {
  const match = weights.length === 1 ? FIRST_SHARD.exec(basename(weights[0]!)) : null;
  if (!match) return weights;
  const [, prefix, count] = match;
  const here = new Set(await readdir(dirname(weights[0]!)).catch(() => []));
  return Array.from({ length: Number(count) }, (_, i) => {
    const name = `${prefix}-${String(i + 1).padStart(5, "0")}-of-${count}.gguf`;
    if (!here.has(name)) throw new PackageError(`${join(dirname(weights[0]!), name)} is missing: shard ${i + 1} of the ${Number(count)} files of ${prefix}`);
    return join(dirname(weights[0]!), name);
  });
}

export async function packageModel(files: PackageFiles, created = Math.floor(Date.now() / 1000)): Promise<Package> {
  if (files.weights.length === 0) throw new PackageError("no GGUF weights to package");
  const roles: [string, string][] = [
    ...files.weights.map((p): [string, string] => [p, MediaTypes.gguf]),
    ...(files.mmproj ? [[files.mmproj, MediaTypes.mmproj] as [string, string]] : []),
    ...(files.chatTemplate ? [[files.chatTemplate, MediaTypes.chatTemplate] as [string, string]] : []),
    ...(files.licenses ?? []).map((p): [string, string] => [p, MediaTypes.license]),
  ];
  const layers: Layer[] = [];
  for (const [path, mediaType] of roles) layers.push(await layerOf(path, mediaType));
  const weightBytes = layers.filter((l) => l.mediaType === MediaTypes.gguf).reduce((sum, l) => sum + l.size, 0);
  const config = await readGgufConfig(files.weights[0]!, weightBytes, files.weights.slice(1)).catch((error: Error) => {
    throw new PackageError(`the GGUF headers of ${files.weights.join(", ")} do not make a model: ${error.message}`);
  });
  const artifact = buildArtifact({ config, created }, layers.map((l) => ({ ...l, filepath: basename(l.path) })));
  const entry = (size: number) => 512 + size + tarPadding(size).byteLength;
  const size = layers.reduce((sum, l) => sum + entry(l.size), 0) + entry(artifact.config.byteLength) + entry(artifact.manifest.byteLength) + tarEnd().byteLength;
  return { artifact, layers, size, archive: (progress) => archiveStream(artifact, layers, created, progress) };
}

/** DMR's archive layout: each layer under blobs/sha256/<hex>, then the config blob, then manifest.json. */
function archiveStream(artifact: Artifact, layers: Layer[], mtime: number, progress?: (layer: Layer, current: number) => void): ReadableStream<Uint8Array> {
  async function* parts(): AsyncGenerator<Uint8Array> {
    for (const layer of layers) {
      yield tarHeader(`blobs/sha256/${layer.digest.slice(7)}`, layer.size, mtime);
      let current = 0;
      for await (const chunk of fileBody(layer.path) as unknown as AsyncIterable<Uint8Array>) {
        current += chunk.byteLength;
        if (current > layer.size) throw new PackageError(`${layer.path} grew while it was being packaged`);
        progress?.(layer, current);
        yield chunk;
      }
      if (current !== layer.size) throw new PackageError(`${layer.path} changed while it was being packaged`);
      yield tarPadding(layer.size);
    }
    // Copies: a receiver in this process may take over the buffers it is handed (the store's
    // hashing thread does), and the artifact must stay whole for the next archive.
    for (const [name, bytes] of [[`blobs/sha256/${artifact.configDescriptor.digest.slice(7)}`, artifact.config], ["manifest.json", artifact.manifest]] as const) {
      yield tarHeader(name, bytes.byteLength, mtime);
      yield bytes.slice();
      yield tarPadding(bytes.byteLength);
    }
    yield tarEnd();
  }
  const iterator = parts();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (let next = await iterator.next(); ; next = await iterator.next()) {
          if (next.done) return controller.close();
          if (next.value.byteLength > 0) return controller.enqueue(next.value);
        }
      },
      cancel: async () => void (await iterator.return(undefined)),
    },
    { highWaterMark: 0 },
  );
}

import { createHash } from "node:crypto";
import { open, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { env } from "node:process";
import { describeBuild } from "../../sidecar/index.ts";
import { insufficientStorage, unsupportedArtifact, upstreamFailure } from "../models/errors.ts";
import { parseReference } from "../models/reference.ts";
import { refuseWithoutRoom } from "../models/store/room.ts";
import { openRepository, type Descriptor, type RegistryOptions } from "../models/registry/client.ts";
import type { PullEvent } from "../models/pull/plan.ts";
import { progressReporter } from "../models/pull/progress.ts";
import type { Runtime } from "../runtime/types.ts";
import { badRequest, HttpError } from "../http/errors.ts";
import { glibcRefusal, hostGlibc, neededGlibc } from "./glibc.ts";
import { hostArch, locate } from "./layout.ts";
import type { EngineRecord, EngineStore } from "./store.ts";
import { checkLinks, imageTree, LAYER_TYPES, markExecutable, unpackLayer } from "./unpack.ts";

// A pull of an engine image, through the registry client the models use: the manifest, then each
// layer streamed to a file while its digest and size are checked, then unpacked (unpack.ts); the
// layout finds llama-server, the host's C library is checked against what the build needs, and
// only then is the build run, once, for its `--version` and `--help`. A pull the store's
// filesystem cannot hold is refused first (507). A failure at any step leaves nothing in the store.
// Its watch hears when the layers start downloading, then their bytes as they arrive, in the
// models' progress lines.

/** The build a pull ended with, and whether this pull put it in the store (not there already). */
export type Pulled = { record: EngineRecord; stored: boolean };

/** The most an engine image's layers may hold together: a CUDA build is about 2 GiB. */
export const ENGINE_MAX_BYTES = 8 * 1024 ** 3;

export type PullDeps = {
  store: EngineStore;
  registry: RegistryOptions;
  runtime: Runtime;
  defaultRegistry?: string;
  /** Whether the host has a GPU: picks a CUDA build from an image that holds several. */
  gpu: () => Promise<boolean>;
  hostGlibc?: () => Promise<string | undefined>;
};

/** Who follows a pull: told once its layers start downloading (nothing was refused before), then their progress lines. */
export type PullWatch = { started(): void; progress(event: PullEvent): void };

const UNWATCHED: PullWatch = { started() {}, progress() {} };

export async function pullEngine(input: string, deps: PullDeps, signal: AbortSignal, watch: PullWatch = UNWATCHED): Promise<Pulled> {
  const reference = parseReference(input, deps.defaultRegistry ? { defaultRegistry: deps.defaultRegistry } : {});
  const repository = openRepository(reference, deps.registry);
  // Of an image for several platforms, this host's (Linux, its architecture).
  const manifest = await repository.manifest(signal, { os: "linux", architecture: hostArch() });
  // The same build under another name: kept once, under the name it came with first.
  const known = (await deps.store.list()).find((r) => r.digest === manifest.digest);
  if (known) return { record: known, stored: false };
  const size = manifest.layers.reduce((sum, l) => sum + l.size, 0);
  if (size > ENGINE_MAX_BYTES) throw unsupportedArtifact(`${reference.key} holds ${size} bytes, more than an engine may (${ENGINE_MAX_BYTES})`);
  const unknown = manifest.layers.find((l) => !LAYER_TYPES.includes(l.mediaType));
  if (unknown) throw unsupportedArtifact(`${reference.key} has a layer of type ${unknown.mediaType}: an engine image's layers are tar files, plain or gzip`);
  // A layer is downloaded whole, then unpacked (at least as large) and removed: the layers' bytes
  // are the least the pull needs. Refused before a byte is fetched, as a model pull is.
  refuseWithoutRoom(reference.key, size, await deps.store.freeSpace(), "engine store");
  const incoming = await deps.store.incoming();
  // Progress in the models' shape and pace (at most a line per layer every 100 ms, and each layer's last).
  const report = progressReporter(size, watch.progress);
  watch.started();
  try {
    const image = join(incoming.dir, "image");
    const tree = imageTree(image);
    for (const [i, layer] of manifest.layers.entries()) {
      const file = join(incoming.dir, `layer-${i}`);
      await download(repository.blobSource(layer), layer, file, signal, (bytes) => report(layer, bytes));
      report(layer, layer.size, true);
      await unpackLayer(file, layer.mediaType.endsWith("gzip"), tree);
      await rm(file);
    }
    checkLinks(tree);
    const tag = reference.tag;
    const found = await locate(image, tag, await deps.gpu());
    if (!found) throw unsupportedArtifact(`${reference.key} holds no llama-server where llama.cpp's images (app/llama-server) or Docker Model Runner's (com.docker.llama-server.native.linux.<variant>.<arch>/bin) keep it`);
    const binaryDir = found.binary.split("/").slice(0, -1).join("/");
    await markExecutable(tree, [binaryDir, ...found.libraryDirs]);
    await refuseNewerGlibc(image, [binaryDir, ...found.libraryDirs], reference.key, deps.hostGlibc ?? hostGlibc);
    const libraryDirs = found.libraryDirs.map((d) => join(image, d));
    const described = await describeBuild(deps.runtime, join(image, found.binary), env, libraryDirs).catch((error: Error) => {
      throw badRequest("engine_unusable", `${reference.key} does not run here: ${error.message}`);
    });
    const record: EngineRecord = {
      name: tag,
      reference: reference.key,
      digest: manifest.digest,
      layout: found.layout,
      variant: found.variant,
      binary: found.binary,
      libraryDirs: found.libraryDirs,
      version: described.version,
      flags: described.flags,
      size,
      pulledAt: new Date().toISOString(),
    };
    return { record, stored: await incoming.commit(record) };
  } catch (error) {
    await incoming.discard();
    // The layers' bytes fitted, what they unpack to did not (a gzip layer unpacks larger).
    if ((error as NodeJS.ErrnoException).code === "ENOSPC") throw insufficientStorage(`the engine store's disk filled while pulling ${reference.key}: nothing of it is kept`);
    throw error;
  }
}

/** The layer's bytes into `file`, refused unless they are its size and digest. */
async function download(source: ReturnType<ReturnType<typeof openRepository>["blobSource"]>, layer: Descriptor, file: string, signal: AbortSignal, onProgress: (bytes: number) => void): Promise<void> {
  const { body } = await source({ start: 0 }, signal);
  const hash = createHash("sha256");
  const out = await open(file, "wx", 0o600);
  let bytes = 0;
  try {
    for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
      bytes += chunk.byteLength;
      if (bytes > layer.size) throw upstreamFailure(`layer ${layer.digest} is longer than its ${layer.size} bytes: refused`);
      hash.update(chunk);
      await out.write(chunk);
      onProgress(bytes);
    }
  } catch (error) {
    // A connection the registry dropped is its failure (502), said with the layer it cut; ours and a cancel go as they are.
    if (error instanceof HttpError || signal.aborted) throw error;
    throw upstreamFailure(`layer ${layer.digest} ended after ${bytes} of its ${layer.size} bytes: ${(error as Error).message}`);
  } finally {
    await out.close();
  }
  if (bytes !== layer.size) throw upstreamFailure(`layer ${layer.digest} ended after ${bytes} of its ${layer.size} bytes`);
  const digest = `sha256:${hash.digest("hex")}`;
  if (digest !== layer.digest) throw upstreamFailure(`layer ${layer.digest} does not match its digest (got ${digest}): refused, nothing of it is kept`);
}

/** A build needing a newer glibc than the host's is refused before anything of it runs. */
async function refuseNewerGlibc(image: string, dirs: string[], key: string, host: () => Promise<string | undefined>): Promise<void> {
  const files = (await Promise.all(dirs.map(async (d) => (await readdir(join(image, d)).catch(() => [] as string[])).map((f) => join(image, d, f))))).flat();
  const why = glibcRefusal(await neededGlibc(files), await host());
  if (why) throw badRequest("engine_needs_newer_glibc", `${key} cannot run on this host: ${why}`);
}

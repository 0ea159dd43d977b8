import { open, readFile, stat } from "node:fs/promises";
import * as z from "zod";
import { badRequest } from "../../http/errors.ts";
import { insufficientStorage, unsupportedArtifact } from "../errors.ts";
import { describeModel } from "../pull/describe.ts";
import { MediaTypes } from "../registry/client.ts";
import { filesOf, parseArtifactConfig } from "../registry/plan.ts";
import { CorruptBlobError } from "../store/blobs.ts";
import type { ModelStore, StoredModel } from "../store/store.ts";
import { DOCUMENT_LIMIT, DOCUMENT_LIMIT_TEXT } from "../upstream.ts";
import { readTar } from "./tar.ts";

// A model archive loaded into the store (`POST /models/load`, how Docker Model Runner's
// `docker model package` hands the runner a model it built): a tar of `blobs/sha256/<hex>` files
// and a `manifest.json` last. Each blob is written as a pulled one is (a partial file, hashed on
// the way, renamed only if its digest matches) and held until the model is recorded. Only a
// manifest whose every blob is here, whose weights are GGUF, becomes a model: a bad archive is a
// 400 and leaves no model (the blobs it brought are unused, and purge takes them).

const Descriptor = z.looseObject({ mediaType: z.string(), digest: z.string().regex(/^sha256:[0-9a-f]{64}$/), size: z.number().int().nonnegative() });
const Manifest = z.looseObject({ mediaType: z.literal(MediaTypes.manifest).optional(), config: Descriptor, layers: z.array(Descriptor) });
type Descriptor = z.infer<typeof Descriptor>;

const badArtifact = (why: string) => badRequest("invalid_model_archive", `the model archive is not a model: ${why}`);

const BLOB_ENTRY = /^blobs\/sha256\/([0-9a-f]{64})$/;

/** How long the archive may stop arriving before the load fails. */
export const ARCHIVE_STALL_MS = 30_000;

async function readWhole(body: ReadableStream<Uint8Array>, size: number): Promise<Uint8Array> {
  if (size > DOCUMENT_LIMIT) throw badArtifact(`its manifest.json is larger than ${DOCUMENT_LIMIT_TEXT}`);
  return new Uint8Array(await new Response(body).arrayBuffer());
}

function parseManifest(bytes: Uint8Array): z.infer<typeof Manifest> {
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    throw badArtifact("its manifest.json is not JSON");
  }
  const parsed = Manifest.safeParse(json);
  if (!parsed.success) throw badArtifact(`its manifest.json is not an OCI image manifest (${z.prettifyError(parsed.error)})`);
  if (!(MediaTypes.configs as readonly string[]).includes(parsed.data.config.mediaType)) {
    throw unsupportedArtifact(`unsupported model config media type "${parsed.data.config.mediaType}"`);
  }
  return parsed.data;
}

/** Every blob the manifest names is here, as large as it says; weights and projector are GGUF files. */
async function checkBlobs(store: ModelStore, config: Descriptor, layers: Descriptor[]): Promise<void> {
  for (const blob of [config, ...layers]) {
    const size = await stat(store.layout.blob(blob.digest)).then((s) => s.size, () => undefined);
    if (size === undefined) throw badArtifact(`blob ${blob.digest} is neither in the archive nor in the store`);
    if (size !== blob.size) throw badArtifact(`blob ${blob.digest} is ${size} bytes, its descriptor says ${blob.size}`);
  }
  for (const layer of layers.filter((l) => l.mediaType === MediaTypes.gguf || l.mediaType === MediaTypes.mmproj)) {
    const file = await open(store.layout.blob(layer.digest), "r");
    const magic = new Uint8Array(4);
    await file.read(magic, 0, 4, 0).finally(() => file.close());
    if (new TextDecoder().decode(magic) !== "GGUF") throw badArtifact(`layer ${layer.digest} (${layer.mediaType}) is not a GGUF file`);
  }
}

async function record(store: ModelStore, manifestBytes: Uint8Array, tag: string | undefined, releases: (() => void)[]): Promise<StoredModel> {
  const manifest = parseManifest(manifestBytes);
  const files = filesOf(manifest.layers);
  const used = new Set(Object.values(files).flat());
  const layers = manifest.layers.filter((l) => used.has(l.digest));
  // Held before they are checked, as a pull holds its layers: blobs the store had already (not in
  // the archive) are not collected by any process between the check and the record.
  releases.push(await store.pin([manifest.config, ...layers].map((b) => b.digest)));
  await checkBlobs(store, manifest.config, layers);
  if (manifest.config.size > DOCUMENT_LIMIT) throw badArtifact(`its config is larger than ${DOCUMENT_LIMIT_TEXT}`);
  const artifact = parseArtifactConfig(await readFile(store.layout.blob(manifest.config.digest)));
  const created = artifact.descriptor?.created ? Math.floor(Date.parse(artifact.descriptor.created) / 1000) : undefined;
  const sizes = new Map(layers.map((l) => [l.digest, l.size]));
  const described = await describeModel(store, { ...files, config: manifest.config.digest }, sizes, {
    ...(artifact.config ? { config: artifact.config } : {}),
    ...(created && Number.isFinite(created) ? { created } : {}),
  }).catch((error: Error) => {
    throw badArtifact(`the GGUF header of its weights cannot be read (${error.message})`);
  });
  return store.add({ ...described, manifest: manifestBytes, tag });
}

/** Writes one archive entry as a blob (held from now on); the entry's name must be its digest. */
async function storeEntry(store: ModelStore, digest: string, size: number, body: ReadableStream<Uint8Array>, signal: AbortSignal) {
  try {
    await store.downloadBlob({ digest, size, signal, source: async () => ({ body, start: 0, ranged: false }) });
  } catch (error) {
    if (error instanceof CorruptBlobError) throw badArtifact(`the bytes of ${digest} do not match that digest`);
    if ((error as NodeJS.ErrnoException).code === "ENOSPC") throw insufficientStorage(`the model store's disk is full (loading ${digest})`);
    throw error;
  }
}

/** Loads the archive in `body`; the model is tagged `tag` (its key), or left untagged for the client to tag. */
export async function loadArchive(store: ModelStore, body: ReadableStream<Uint8Array>, tag: string | undefined, signal: AbortSignal): Promise<StoredModel> {
  const releases: (() => void)[] = [];
  let manifest: Uint8Array | undefined;
  try {
    for await (const entry of readTar(body, ARCHIVE_STALL_MS)) {
      signal.throwIfAborted();
      if (entry.type !== "0") continue;
      if (entry.name === "manifest.json") {
        manifest = await readWhole(entry.body, entry.size);
        continue;
      }
      const hex = BLOB_ENTRY.exec(entry.name)?.[1];
      if (!hex) continue; // DMR's reader skips what is not a blob or the manifest
      const digest = `sha256:${hex}`;
      releases.push(await store.pin([digest]));
      await storeEntry(store, digest, entry.size, entry.body, signal);
    }
    if (!manifest) throw badArtifact("it has no manifest.json");
    return await record(store, manifest, tag, releases);
  } finally {
    for (const release of releases) release();
  }
}

import { readFile } from "node:fs/promises";
import * as z from "zod";
import { badRequest } from "../../http/errors.ts";
import { fileBody } from "../file-body.ts";
import { buildArtifact, FILEPATH_ANNOTATION, type ArtifactLayer } from "../artifact.ts";
import { modelNotFound } from "../errors.ts";
import { resolveOr404 } from "../lookup.ts";
import { HUGGING_FACE, parseReference, type ModelReference } from "../reference.ts";
import type { RegistryOptions } from "../registry/client.ts";
import type { TransferEvent } from "../pull/plan.ts";
import { PROGRESS_INTERVAL_MS } from "../pull/progress.ts";
import type { ModelStore, StoredModel } from "../store/store.ts";
import { openDestination, type BlobBody, type Destination } from "./destination.ts";

// A push (`POST /models/{name}/push`, as Docker Model Runner's): the model named is sent to the
// registry its name names (tag it `registry/repo:tag` first). The stored artifact goes as it is,
// byte for byte, so that its id is the same there; a model whose artifact is not whole here (the
// config of a model pulled before configs were kept, layers of kinds a pull does not fetch) goes
// as an artifact rebuilt from its record, and a warning says so. Everything that can refuse the
// push (the name, the model, the registry's credentials) is checked before progress streams.

export type PushEvent = TransferEvent<"push">;

const Descriptor = z.looseObject({ mediaType: z.string(), digest: z.string().regex(/^sha256:[0-9a-f]{64}$/), size: z.number().int().nonnegative() });
const StoredManifest = z.looseObject({ config: Descriptor, layers: z.array(Descriptor) });
type Descriptor = z.infer<typeof Descriptor>;

/** A blob to send: its descriptor and how to read it (a store file, at `path`, or bytes built here). */
type Outgoing = { descriptor: Descriptor; body: BlobBody; path?: string };

export type PushPlan = {
  reference: ModelReference;
  manifest: Uint8Array;
  layers: Outgoing[];
  config: Outgoing;
  /** Why the artifact sent is not the one stored, when it is not. */
  warning?: string;
  destination: Destination;
  /** Lets the store collect the blobs again (a model deleted meanwhile loses them only then). */
  release(): void;
};

const storeFile = (path: string): BlobBody => (read) => fileBody(path, read);

const bytesBody = (bytes: Uint8Array): BlobBody => (read) =>
  new ReadableStream<Uint8Array>({
    start(controller) {
      read(bytes.byteLength);
      controller.enqueue(bytes);
      controller.close();
    },
  });

async function storedManifest(store: ModelStore, model: StoredModel) {
  try {
    const bytes = new Uint8Array(await readFile(store.layout.manifest(model.id)));
    return { bytes, ...StoredManifest.parse(JSON.parse(new TextDecoder().decode(bytes))) };
  } catch {
    return undefined;
  }
}

/** The artifact to send: the stored one when every blob it names is here, else one rebuilt from what is. */
async function chooseArtifact(store: ModelStore, model: StoredModel) {
  const stored = await storedManifest(store, model);
  const present = async (d: Descriptor) => store.hasBlob(d.digest);
  const fromStore = (d: Descriptor): Outgoing => ({ descriptor: d, body: storeFile(store.layout.blob(d.digest)), path: store.layout.blob(d.digest) });
  if (stored && (await present(stored.config)) && (await Promise.all(stored.layers.map(present))).every(Boolean)) {
    return { manifest: stored.bytes, config: fromStore(stored.config), layers: stored.layers.map(fromStore) };
  }
  // The store records a model only with its manifest: one that cannot be read is a damaged store.
  if (!stored) throw new Error(`the stored manifest of ${model.id} cannot be read`);
  const kept = (await Promise.all(stored.layers.map(async (l) => ((await present(l)) ? l : undefined)))).filter((l) => l !== undefined);
  const layers: ArtifactLayer[] = kept.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.size, ...filepathOf(l) }));
  const artifact = buildArtifact(model, layers);
  return {
    manifest: artifact.manifest,
    config: { descriptor: artifact.configDescriptor, body: bytesBody(artifact.config) } as Outgoing,
    layers: kept.map(fromStore),
    warning: `the stored artifact of ${model.id} is not whole here (its config or some layers were never kept): pushing one rebuilt from the model's record, whose id is ${artifact.id}`,
  };
}

function filepathOf(layer: Descriptor): { filepath?: string } {
  const annotations = (layer as { annotations?: Record<string, unknown> }).annotations;
  const value = annotations?.[FILEPATH_ANNOTATION];
  return typeof value === "string" ? { filepath: value } : {};
}

export async function planPush(
  store: ModelStore,
  name: string,
  registry: RegistryOptions,
  bearerToken: string | undefined,
  signal: AbortSignal,
): Promise<PushPlan> {
  const reference = parseReference(name, store.referenceOptions);
  if (reference.registry === HUGGING_FACE) throw badRequest("unsupported_destination", "pushing to Hugging Face is not supported: tag the model with a registry's name and push that");
  if (reference.digest) throw badRequest("invalid_reference", `a push needs a tag to put the model under, not a digest: ${name}`);
  const model = await resolveOr404(store, name);
  const artifact = await chooseArtifact(store, model);
  // Held as a runner holds its files: a delete meanwhile, by any process on the store, leaves
  // them until the push is done; one that came first makes the model not found.
  const paths = [artifact.config, ...artifact.layers].flatMap((b) => (b.path ? [b.path] : []));
  const release = await store.serve(paths).catch(() => Promise.reject(modelNotFound(name)));
  const destination = openDestination(reference, registry, bearerToken);
  try {
    await destination.start(signal);
  } catch (error) {
    release();
    throw error;
  }
  return { reference, ...artifact, destination, release };
}

/** At most one progress line per layer every PROGRESS_INTERVAL_MS, as a pull's, and always the one that completes it. */
function progressOf(emit: (event: PushEvent) => void, layer: Descriptor) {
  let last = 0;
  return (current: number) => {
    const now = Date.now();
    if (current < layer.size && now - last < PROGRESS_INTERVAL_MS) return;
    last = now;
    const message = `Uploaded: ${(current / 1_000_000).toFixed(2)} MB`;
    emit({ type: "progress", message, total: layer.size, layer: { id: layer.digest, size: layer.size, current }, mode: "push" });
  };
}

async function send(plan: PushPlan, blob: Outgoing, signal: AbortSignal, report?: (current: number) => void): Promise<void> {
  const { digest, size } = blob.descriptor;
  if (!(await plan.destination.hasBlob(digest, signal))) {
    let current = 0;
    await plan.destination.putBlob({ digest, size }, (read) => blob.body((n) => (read(n), report?.((current += n)))), signal);
  }
  report?.(size);
}

/** Sends the layers, then the config, then the manifest; events as DMR's (a success line at the end). */
export async function runPush(plan: PushPlan, emit: (event: PushEvent) => void, signal: AbortSignal): Promise<void> {
  try {
    if (plan.warning) emit({ type: "warning", message: plan.warning, mode: "push" });
    for (const layer of plan.layers) await send(plan, layer, signal, progressOf(emit, layer.descriptor));
    await send(plan, plan.config, signal);
    await plan.destination.putManifest(plan.manifest, signal);
    emit({ type: "success", message: "Model pushed successfully", mode: "push" });
  } finally {
    plan.release();
    await plan.destination.close();
  }
}

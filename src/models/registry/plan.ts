import * as z from "zod";
import { unsupportedArtifact } from "../errors.ts";
import { describeModel, type ModelFiles } from "../pull/describe.ts";
import type { PullPlan } from "../pull/plan.ts";
import type { ModelReference } from "../reference.ts";
import { ModelConfig } from "../store/model-index.ts";
import type { ModelStore } from "../store/store.ts";
import { checkDocumentSize, MediaTypes, openRepository, type Descriptor, type RegistryOptions } from "./client.ts";

// A pull of a Docker model artifact: the manifest and its config media type are checked first;
// the layers the runner uses (weights, mmproj, chat template, license) are then downloaded.

const ArtifactConfig = z.looseObject({
  config: ModelConfig.optional(),
  descriptor: z.looseObject({ created: z.string().optional() }).optional(),
});

/** The blobs a model uses, by role, from an artifact's layers (GGUF shards in their order). */
export function filesOf(layers: Descriptor[]): ModelFiles {
  const first = (mediaType: string) => layers.find((l) => l.mediaType === mediaType)?.digest;
  const gguf = layers.filter((l) => l.mediaType === MediaTypes.gguf).map((l) => l.digest);
  if (gguf.length === 0) throw unsupportedArtifact("the artifact has no GGUF layer");
  const optional = { mmproj: first(MediaTypes.mmproj), chatTemplate: first(MediaTypes.chatTemplate), license: first(MediaTypes.license) };
  return { gguf, ...Object.fromEntries(Object.entries(optional).filter(([, v]) => v)) };
}

export function parseArtifactConfig(bytes: Uint8Array) {
  try {
    const parsed = ArtifactConfig.safeParse(JSON.parse(new TextDecoder().decode(bytes)));
    if (parsed.success) return parsed.data;
  } catch {
    // Fall through: the GGUF header alone describes the model.
  }
  return {};
}

export async function planRegistryPull(
  store: ModelStore,
  reference: ModelReference,
  options: RegistryOptions,
  bearerToken: string | undefined,
  signal: AbortSignal,
): Promise<PullPlan> {
  const repository = openRepository(reference, options, bearerToken);
  const manifest = await repository.manifest(signal);
  if (!(MediaTypes.configs as readonly string[]).includes(manifest.config.mediaType)) {
    throw unsupportedArtifact(`unsupported model config media type "${manifest.config.mediaType}"`);
  }
  // The config is read once the layers are in; one that is too large is refused before they are fetched.
  checkDocumentSize(manifest.config, `the config of ${reference.key}`);
  const files = filesOf(manifest.layers);
  const wanted = new Set(Object.values(files).flat());
  const layers = manifest.layers.filter((l) => wanted.has(l.digest));
  return {
    key: reference.key,
    id: manifest.digest,
    manifest: manifest.bytes,
    layers: layers.map((l) => ({ digest: l.digest, size: l.size, source: repository.blobSource(l) })),
    config: manifest.config.digest,
    async describe(describeSignal) {
      const configBytes = await repository.blob(manifest.config, describeSignal);
      // Kept, so that the model can be pushed again as the very artifact it came as.
      await store.putBlob(configBytes);
      const artifact = parseArtifactConfig(configBytes);
      const created = artifact.descriptor?.created ? Math.floor(Date.parse(artifact.descriptor.created) / 1000) : undefined;
      const sizes = new Map(layers.map((l) => [l.digest, l.size]));
      const stored = { ...files, config: manifest.config.digest };
      return describeModel(store, stored, sizes, { config: artifact.config, ...(created && Number.isFinite(created) ? { created } : {}) });
    },
  };
}

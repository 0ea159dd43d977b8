import { MediaTypes } from "./registry/client.ts";
import { digestOf } from "./store/manifests.ts";
import type { ModelConfig } from "./store/model-index.ts";

// A Docker model artifact as Docker Model Runner builds one (`docker model package`): an OCI image
// manifest whose config blob describes the model (the GGUF header's values, when it was made, the
// digests of its files) and whose layers are the files, uncompressed, each annotated with the
// name it had. Package builds new ones; push rebuilds one when the stored artifact is incomplete.

/** The annotation that carries a layer's original file name (DMR's `types.AnnotationFilePath`). */
export const FILEPATH_ANNOTATION = "org.cncf.model.filepath";

export type ArtifactLayer = { mediaType: string; digest: string; size: number; filepath?: string };

export type Descriptor = { mediaType: string; digest: string; size: number };

export type Artifact = { config: Uint8Array; configDescriptor: Descriptor; manifest: Uint8Array; id: string };

const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** The config blob and the manifest naming it and `layers`, in their order (GGUF shards first to last). */
export function buildArtifact(model: { config: ModelConfig; created: number }, layers: ArtifactLayer[]): Artifact {
  const config = encode({
    config: model.config,
    descriptor: { created: new Date(model.created * 1000).toISOString() },
    rootfs: { type: "rootfs", diff_ids: layers.map((l) => l.digest) },
  });
  const configDescriptor = { mediaType: MediaTypes.configs[0], digest: digestOf(config), size: config.byteLength };
  const manifest = encode({
    schemaVersion: 2,
    mediaType: MediaTypes.manifest,
    config: configDescriptor,
    layers: layers.map(({ mediaType, digest, size, filepath }) => ({
      mediaType,
      digest,
      size,
      ...(filepath ? { annotations: { [FILEPATH_ANNOTATION]: filepath } } : {}),
    })),
  });
  return { config, configDescriptor, manifest, id: digestOf(manifest) };
}

import { readGgufConfig } from "../gguf.ts";
import type { ModelStore } from "../store/store.ts";
import type { IndexEntry, ModelConfig } from "../store/model-index.ts";

// The record of a pulled model: its files by role, and its config read from the GGUF header of
// the stored weights; values the artifact's own config carries fill what the header lacks.

export type ModelFiles = IndexEntry["files"];

export async function describeModel(
  store: ModelStore,
  files: ModelFiles,
  sizes: Map<string, number>,
  artifact: { config?: ModelConfig; created?: number } = {},
): Promise<Omit<IndexEntry, "id" | "tags">> {
  const weights = files.gguf.reduce((sum, digest) => sum + (sizes.get(digest) ?? 0), 0);
  const [first, ...shards] = files.gguf.map((digest) => store.layout.blob(digest));
  const fromHeader = await readGgufConfig(first!, weights, shards);
  return {
    created: artifact.created ?? Math.floor(Date.now() / 1000),
    config: { ...artifact.config, ...fromHeader },
    files,
  };
}

import type { BlobSource } from "../store/source.ts";
import type { IndexEntry } from "../store/model-index.ts";

// What a pull must do, found before any progress is streamed (so that a bad reference, a refused
// login, an unknown model or an unsupported artifact still get their HTTP status): the model's
// name and id, the blobs to download and how to record the model once they are on disk.

export type PlannedLayer = { digest: string; size: number; source: BlobSource };

export type PullPlan = {
  /** The tag the store keeps, e.g. `ai/smollm2:latest`. */
  key: string;
  /** The manifest's digest: the model's id. */
  id: string;
  manifest: Uint8Array;
  layers: PlannedLayer[];
  /** The artifact's config blob, which `describe` stores: held, like the layers, until the model is recorded. */
  config?: string;
  /** Reads what the model's record needs once its blobs are present (config blob, GGUF header). */
  describe(signal: AbortSignal): Promise<Omit<IndexEntry, "id" | "tags">>;
};

/** A progress line in Docker Model Runner's shape, of a pull or of a push. */
export type TransferEvent<Mode extends "pull" | "push"> = {
  type: "progress" | "success" | "warning" | "error";
  message: string;
  total?: number;
  layer?: { id: string; size: number; current: number };
  mode: Mode;
};

export type PullEvent = TransferEvent<"pull">;

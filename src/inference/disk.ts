import { stat } from "node:fs/promises";
import { dirname } from "node:path";
import type { LlamaServerBinary } from "../../sidecar/index.ts";
import type { ModelStore } from "../models/index.ts";
import { folderBytes } from "../models/store/files.ts";

// Docker Model Runner's `GET /engines/df`: bytes of the model store and of the inference engine;
// ours adds what of the store nothing uses (what a purge of unused files frees), and of that what
// incomplete downloads hold.

export type DiskUsage = {
  models_disk_usage: number;
  default_backend_disk_usage: number;
  reclaimable_disk_usage: number;
  incomplete_downloads_disk_usage: number;
  /** Ours: the builds pulled into the engine store, all of them. */
  engines_disk_usage: number;
};

export async function diskUsage(store: Pick<ModelStore, "root" | "unused">, binary: () => Promise<LlamaServerBinary>, engines?: { bytes(): Promise<number>; root: string }): Promise<DiskUsage> {
  // Our build's folder holds the binary and its shared libraries; one found elsewhere (on PATH) is
  // counted alone. 0 while none is found.
  const engine = await binary().then(
    (b) => (b.source === "cache" ? folderBytes(dirname(b.path)) : stat(b.path).then((s) => s.size)),
    () => 0,
  );
  const unused = await store.unused(0);
  const engineBytes = (await engines?.bytes()) ?? 0;
  // The engine store lies in the model store's folder by default: its bytes are not the models'.
  const inModels = engines && (engines.root + "/").startsWith(store.root.replace(/\/?$/, "/")) ? engineBytes : 0;
  return {
    models_disk_usage: (await folderBytes(store.root)) - inModels,
    default_backend_disk_usage: engine,
    reclaimable_disk_usage: unused.bytes,
    incomplete_downloads_disk_usage: unused.incompleteBytes,
    engines_disk_usage: engineBytes,
  };
}

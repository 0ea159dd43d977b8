import { stat } from "node:fs/promises";
import { badRequest } from "../../http/errors.ts";
import type { ModelStore, StoredModel } from "../store/store.ts";
import { storeFiles } from "../store/sweep.ts";

// Purge: every model (Docker Model Runner's `DELETE /models/purge`), or only what nothing uses:
// models no tag names, blobs no model names, and downloads left incomplete for longer than an age
// (a pull resumes from them until then). What runs now (a pull, a push, a load) keeps its files.
// The answer says what went and how many bytes that freed.

export type PurgeRequest = { all: boolean; incompleteOlderThanMs: number };

export type PurgeReport = {
  deleted: { id: string; tags: string[] }[];
  removed_files: number;
  freed_bytes: number;
  /** Of `freed_bytes`, what incomplete downloads held. */
  incomplete_bytes: number;
};

/** Deletes a model, its runners stopped first (the API's delete). */
export type DeleteModel = (model: StoredModel) => Promise<unknown>;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90s`, `15m`, `1h`, `2d`, `0`: an age, in milliseconds. */
export function parseAge(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!match || (!match[2] && Number(match[1]) !== 0)) throw badRequest("invalid_age", `not an age: "${text.slice(0, 40)}" (say 90s, 15m, 1h or 2d)`);
  return Number(match[1]) * UNITS[match[2] ?? "ms"]!;
}

/** Complete blobs and manifests by path, with their sizes: what deleting models can free. */
async function recordedFiles(store: ModelStore): Promise<Map<string, number>> {
  const files = await storeFiles(store.layout);
  return new Map(files.filter((f) => f.kind === "blob" || f.kind === "manifest").map((f) => [f.path, f.bytes]));
}

async function recordedBefore(store: ModelStore, model: StoredModel, now: number, ageMs: number): Promise<boolean> {
  const written = await stat(store.layout.manifest(model.id)).then((s) => s.mtimeMs, () => 0);
  return now - written >= ageMs;
}

export async function purge(store: ModelStore, request: PurgeRequest, deleteModel: DeleteModel): Promise<PurgeReport> {
  const now = Date.now();
  const models = await store.list();
  const doomed: StoredModel[] = [];
  for (const model of models) {
    if (request.all || (model.tags.length === 0 && (await recordedBefore(store, model, now, request.incompleteOlderThanMs)))) doomed.push(model);
  }
  const before = await recordedFiles(store);
  for (const model of doomed) await deleteModel(model);
  const after = await recordedFiles(store);
  // A complete blob or a manifest only goes when deleted: what went with the models is what they freed.
  const gone = [...before].filter(([path]) => !after.has(path));
  const swept = await store.removeUnused(request.all ? 0 : request.incompleteOlderThanMs);
  return {
    deleted: doomed.map((m) => ({ id: m.id, tags: m.tags })),
    removed_files: gone.length + swept.files,
    freed_bytes: gone.reduce((sum, [, bytes]) => sum + bytes, 0) + swept.bytes,
    incomplete_bytes: swept.incompleteBytes,
  };
}

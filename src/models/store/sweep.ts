import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { lockIfFree } from "./collect.ts";
import { isMissing, removeIfPresent } from "./files.ts";
import type { Layout } from "./layout.ts";
import type { Leases } from "./leases.ts";
import { LOCK_HEARTBEAT, type HeldLock } from "./lock-file.ts";
import type { Heartbeat } from "./owner.ts";

// What the store holds that no model uses: blobs no model names (the layers of a pull that
// failed, of a model deleted while a pull still needed them), manifests no model is recorded
// under, downloads left incomplete, temporary files a crash left behind. `df` counts them and
// purge removes them. Blobs in use (held by a pull, a push, a load or a runner of any process on
// the store) are never touched, nor is a manifest or a temporary file written in the last minute:
// a store operation in flight writes those a moment before the index names them. Blobs and
// partial downloads go only under the blob's lock and once no live lease (leases.ts) names them.

export type StoreFileKind = "blob" | "incomplete" | "manifest" | "temporary";

export type StoreFile = { path: string; kind: StoreFileKind; digest?: string; bytes: number; modifiedMs: number };

/** How long a manifest or a temporary file may sit outside the index as part of a write in flight. */
export const IN_FLIGHT_MS = 60_000;

export type UnusedRule = {
  /** Digests of the blobs and manifests of the models kept. */
  referenced: Set<string>;
  /** Blobs that some process on the store holds now (a pull, a push, a load, a runner). */
  held: Set<string>;
  /** Incomplete downloads are unused only once left alone this long (a pull may resume them). */
  incompleteOlderThanMs: number;
  now: number;
};

export type Unused = { files: number; bytes: number; incompleteBytes: number };

const HEX = "[0-9a-f]{64}";
const BLOB = new RegExp(`^(${HEX})$`);
const PARTIAL = new RegExp(`^(${HEX})\\.(?:incomplete|parts)$`);
const TEMPORARY = new RegExp(`^(${HEX})?.*\\.tmp$`);

function classify(name: string, inManifests: boolean): { kind: StoreFileKind; digest?: string } | undefined {
  const digestOf = (match: RegExpExecArray | null) => (match?.[1] ? { digest: `sha256:${match[1]}` } : {});
  const whole = BLOB.exec(name);
  if (whole) return { kind: inManifests ? "manifest" : "blob", ...digestOf(whole) };
  const partial = PARTIAL.exec(name);
  if (partial && !inManifests) return { kind: "incomplete", ...digestOf(partial) };
  const temporary = TEMPORARY.exec(name);
  if (temporary) return { kind: "temporary", ...digestOf(temporary) };
  return undefined; // not ours: left alone
}

async function filesIn(folder: string, inManifests: boolean): Promise<StoreFile[]> {
  let names: string[];
  try {
    names = await readdir(folder);
  } catch (error) {
    if (isMissing(error)) return [];
    throw error;
  }
  const found: StoreFile[] = [];
  for (const name of names) {
    const what = classify(name, inManifests);
    if (!what) continue;
    const path = join(folder, name);
    const info = await stat(path).catch((error: unknown) => (isMissing(error) ? undefined : Promise.reject(error)));
    if (info?.isFile()) found.push({ path, ...what, bytes: info.size, modifiedMs: info.mtimeMs });
  }
  return found;
}

/** The store's own files: blobs (complete and partial), manifests, temporary files of atomic writes. */
export async function storeFiles(layout: Layout): Promise<StoreFile[]> {
  const temporaryIndexes = (await filesIn(layout.root, false)).filter((f) => f.kind === "temporary");
  return [...(await filesIn(layout.blobsDir, false)), ...(await filesIn(layout.manifestsDir, true)), ...temporaryIndexes];
}

export function isUnused(file: StoreFile, rule: UnusedRule): boolean {
  if (file.digest && file.kind !== "manifest" && rule.held.has(file.digest)) return false;
  const age = rule.now - file.modifiedMs;
  switch (file.kind) {
    case "blob":
      return !rule.referenced.has(file.digest!);
    case "manifest":
      return !rule.referenced.has(file.digest!) && age >= IN_FLIGHT_MS;
    case "incomplete":
      return age >= rule.incompleteOlderThanMs;
    case "temporary":
      return age >= Math.max(IN_FLIGHT_MS, rule.incompleteOlderThanMs);
  }
}

const tally = (files: StoreFile[]): Unused => ({
  files: files.length,
  bytes: files.reduce((sum, f) => sum + f.bytes, 0),
  incompleteBytes: files.filter((f) => f.kind === "incomplete").reduce((sum, f) => sum + f.bytes, 0),
});

export async function findUnused(layout: Layout, rule: UnusedRule): Promise<Unused> {
  return tally((await storeFiles(layout)).filter((f) => isUnused(f, rule)));
}

/**
 * Removes the unused files. A blob or partial download goes under the blob's lock (one that a
 * pull holds is skipped), and only if no lease names it once the locks are held: a pull holds
 * its blobs (its lease) before it takes a blob's lock. The caller holds the index's lock, so that
 * `referenced` stays true meanwhile.
 */
export async function removeUnused(layout: Layout, leases: Leases, rule: UnusedRule, heartbeat: Heartbeat = LOCK_HEARTBEAT): Promise<Unused> {
  const candidates = (await storeFiles(layout)).filter((f) => isUnused(f, rule));
  const locked = (f: StoreFile) => f.digest !== undefined && (f.kind === "blob" || f.kind === "incomplete");
  const locks = new Map<string, HeldLock>();
  const removed: StoreFile[] = [];
  try {
    for (const digest of new Set(candidates.filter(locked).map((f) => f.digest!))) {
      const lock = await lockIfFree(layout, digest, heartbeat);
      if (lock) locks.set(digest, lock);
    }
    const held = await leases.held();
    for (const file of candidates) {
      if (file.digest && file.kind !== "manifest" && (held.has(file.digest) || (locked(file) && !locks.has(file.digest)))) continue;
      await removeIfPresent(file.path);
      if (file.kind === "blob") await removeIfPresent(layout.orphanMark(file.digest!));
      removed.push(file);
    }
  } finally {
    await Promise.all([...locks.values()].map((lock) => lock.release()));
  }
  return tally(removed);
}

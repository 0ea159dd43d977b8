import { readdir, utimes } from "node:fs/promises";
import { join } from "node:path";
import { isDigest } from "../reference.ts";
import { isMissing, removeIfPresent, writeFileAtomic } from "./files.ts";
import { sight } from "./lock-file.ts";
import { newOwner, pidAlive, staleReason, thisProcess, type Heartbeat } from "./owner.ts";

// Which blobs each process on the store uses now: one lease file per store object
// (`leases/<pid>-<token>.json`), naming the blobs its pulls are fetching and its runners serve,
// touched while it names any. A process that deletes a model removes only the blobs that no live
// lease names, so no process unlinks what another still reads. A lease whose holder is gone
// (owner.ts) is ignored and removed. Its staleness is judged by the reader's clock alone (no one
// watches it for long), hence a long limit: machines sharing a store must keep their clocks
// within it of each other.

export const LEASE_HEARTBEAT: Heartbeat = { everyMs: 5_000, staleMs: 120_000 };

export type Leases = {
  /** Names `digests` in our lease until the returned function is called; resolves once other processes can read it. */
  hold(digests: string[]): Promise<() => void>;
  /** The digests that this store object and every live process on the store hold now. */
  held(): Promise<Set<string>>;
  /** Drops every hold and the lease file. */
  close(): Promise<void>;
};

function digestsOf(text: string): string[] {
  try {
    const digests = (JSON.parse(text) as { digests?: unknown }).digests;
    return Array.isArray(digests) ? digests.filter((d): d is string => typeof d === "string" && isDigest(d)) : [];
  } catch {
    return [];
  }
}

export function createLeases(dir: string, heartbeat: Heartbeat = LEASE_HEARTBEAT): Leases {
  const owner = newOwner();
  const path = join(dir, `${owner.pid}-${owner.token}.json`);
  const counts = new Map<string, number>();
  let writing: Promise<void> = Promise.resolve();
  let timer: ReturnType<typeof setInterval> | undefined;

  // A holder judged gone had its lease removed by another process: it writes it again.
  const touch = () => {
    const now = new Date();
    utimes(path, now, now).catch((error: unknown) => void (isMissing(error) && publish().catch(() => {})));
  };

  /** Writes the set as it is now; queued, so that an older set never lands after a newer one. */
  function publish(): Promise<void> {
    const run = writing.catch(() => {}).then(async () => {
      if (counts.size === 0) {
        clearInterval(timer);
        timer = undefined;
        return removeIfPresent(path);
      }
      // Not flushed: after a crash of the machine no process of it holds anything.
      await writeFileAtomic(path, JSON.stringify({ ...owner, digests: [...counts.keys()] }), { durable: false });
      timer ??= setInterval(touch, heartbeat.everyMs);
    });
    writing = run;
    return run;
  }

  async function othersHeld(into: Set<string>): Promise<void> {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (error) {
      if (isMissing(error)) return;
      throw error;
    }
    for (const name of names) {
      const file = join(dir, name);
      if (!name.endsWith(".json") || file === path) continue;
      const seen = await sight(file);
      if (!seen) continue;
      if (staleReason(seen, { self: thisProcess(), now: Date.now(), heartbeat, alive: pidAlive })) {
        await removeIfPresent(file);
        continue;
      }
      for (const digest of digestsOf(seen.text)) into.add(digest);
    }
  }

  return {
    async hold(digests) {
      for (const d of digests) counts.set(d, (counts.get(d) ?? 0) + 1);
      let held = true;
      const release = () => {
        if (!held) return;
        held = false;
        for (const d of digests) {
          const count = (counts.get(d) ?? 1) - 1;
          if (count > 0) counts.set(d, count);
          else counts.delete(d);
        }
        void publish().catch(() => {});
      };
      try {
        await publish();
      } catch (error) {
        release();
        throw error;
      }
      return release;
    },
    async held() {
      const all = new Set(counts.keys());
      await othersHeld(all);
      return all;
    },
    close() {
      counts.clear();
      return publish();
    },
  };
}

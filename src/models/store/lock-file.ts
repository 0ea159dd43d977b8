import { randomBytes } from "node:crypto";
import { link, open, rename, utimes, type FileHandle } from "node:fs/promises";
import { isMissing, removeIfPresent } from "./files.ts";
import { newOwner, parseOwner, pidAlive, staleReason, thisProcess, type Heartbeat, type Owner, type Sighting } from "./owner.ts";

// A lock shared by every process on the store: a file created with O_CREAT|O_EXCL ("wx"), which
// exactly one creator gets, on a local filesystem and over NFS (v3 and later) alike. It holds its
// taker's owner record (owner.ts); the taker touches it while it holds it and removes it when
// done. A lock whose taker is gone is broken: moved aside under a name of our own, checked to be
// the very lock judged stale, and removed (one moved by mistake is put back).

export const LOCK_HEARTBEAT: Heartbeat = { everyMs: 2_000, staleMs: 30_000 };

export type HeldLock = {
  /** Aborts when another process broke the lock (it judged this one gone): what it guards must stop. */
  readonly lost: AbortSignal;
  /** Removes the lock, if it is still ours. */
  release(): Promise<void>;
};

export type LockOptions = {
  signal?: AbortSignal;
  /** Between two tries while another process holds the lock. */
  pollMs: number;
  heartbeat?: Heartbeat;
  /** Asked after each try that a live holder foiled: true ends the wait without the lock (what it waited for is done). */
  waiting?: () => Promise<boolean>;
};

/**
 * Looks at a lock or lease file: its owner and last heartbeat. The file is opened and then
 * stat'ed, because an NFS client revalidates what it caches of a file when it opens it.
 */
export async function sight(path: string): Promise<(Sighting & { text: string }) | undefined> {
  let file: FileHandle;
  try {
    file = await open(path, "r");
  } catch (error) {
    if (isMissing(error)) return undefined;
    throw error;
  }
  try {
    const { mtimeMs } = await file.stat();
    const text = await file.readFile("utf8");
    return { owner: parseOwner(text), mtimeMs, text };
  } finally {
    await file.close();
  }
}

/** Takes the lock if no one holds it; undefined when someone does. */
export async function tryLock(path: string, heartbeat: Heartbeat = LOCK_HEARTBEAT): Promise<HeldLock | undefined> {
  const owner = newOwner();
  let file: FileHandle;
  try {
    file = await open(path, "wx");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return undefined;
    throw error;
  }
  try {
    await file.writeFile(JSON.stringify(owner));
  } catch (error) {
    await file.close().catch(() => {});
    await removeIfPresent(path);
    throw error;
  }
  await file.close();
  return held(path, owner, heartbeat);
}

function held(path: string, owner: Owner, heartbeat: Heartbeat): HeldLock {
  const lost = new AbortController();
  let released = false;
  let beating = false;
  const ours = async () => (await sight(path))?.owner?.token === owner.token;
  const beat = async () => {
    if (beating || released) return;
    beating = true;
    try {
      if (await ours()) {
        const now = new Date();
        await utimes(path, now, now);
      } else if (!released) {
        clearInterval(timer);
        lost.abort(new Error(`another process took over ${path}, judging this one gone`));
      }
    } finally {
      beating = false;
    }
  };
  const timer = setInterval(() => void beat().catch(() => {}), heartbeat.everyMs);
  return {
    lost: lost.signal,
    async release() {
      if (released) return;
      released = true;
      clearInterval(timer);
      if (await ours().catch(() => false)) await removeIfPresent(path);
    },
  };
}

/** Removes the lock at `path` if it is still the one whose owner had `token` (judged stale). */
async function breakLock(path: string, token: string | undefined): Promise<void> {
  const aside = `${path}.${randomBytes(6).toString("hex")}.broken`;
  try {
    await rename(path, aside);
  } catch (error) {
    if (isMissing(error)) return; // another process broke it first
    throw error;
  }
  const moved = await sight(aside);
  // Its holder released it and another took it between our look and the move: it goes back,
  // unless a third has taken the lock meanwhile (link, unlike rename, never replaces a file).
  if (moved && moved.owner?.token !== token) await link(aside, path).catch(() => {});
  await removeIfPresent(aside);
}

/**
 * Takes the lock, waiting while a live process holds it and breaking it once its holder is gone.
 * Resolves undefined only when `waiting` said the wait is over.
 */
export async function acquireLock(path: string, options: LockOptions): Promise<HeldLock | undefined> {
  const heartbeat = options.heartbeat ?? LOCK_HEARTBEAT;
  let watched: { heartbeat: string; since: number } | undefined;
  for (;;) {
    options.signal?.throwIfAborted();
    const lock = await tryLock(path, heartbeat);
    if (lock) return lock;
    const seen = await sight(path);
    if (!seen) continue; // released since: try again at once
    const beat = `${seen.mtimeMs}/${seen.owner?.token}`;
    if (watched?.heartbeat !== beat) watched = { heartbeat: beat, since: performance.now() };
    const judge = { self: thisProcess(), now: Date.now(), heartbeat, alive: pidAlive, unchangedForMs: performance.now() - watched.since };
    if (staleReason(seen, judge)) {
      await breakLock(path, seen.owner?.token);
      continue;
    }
    if (await options.waiting?.()) return undefined;
    await pause(options.pollMs, options.signal);
  }
}

/** Waits `ms`; rejects with the signal's reason if it aborts first. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const abort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", abort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", abort, { once: true });
  });
}

/** Runs `work` holding the lock (waiting for it as `acquireLock` does). */
export async function withLock<T>(path: string, options: Omit<LockOptions, "waiting">, work: (lock: HeldLock) => Promise<T>): Promise<T> {
  const lock = (await acquireLock(path, options))!;
  try {
    return await work(lock);
  } finally {
    await lock.release();
  }
}

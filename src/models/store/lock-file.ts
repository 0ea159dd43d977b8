import { randomBytes } from "node:crypto";
import { link, open, readdir, rename, utimes, type FileHandle } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { HttpError } from "../../http/errors.ts";
import { isMissing, removeIfPresent } from "./files.ts";
import { holderExited, newOwner, parseOwner, pidAlive, staleReason, thisProcess, type Heartbeat, type Owner, type Sighting } from "./owner.ts";

// A lock shared by every process on the store: a file created with O_CREAT|O_EXCL ("wx"), which
// exactly one creator gets, on a local filesystem and over NFS (v3 and later) alike. It holds its
// taker's owner record (owner.ts); the taker touches it while it holds it and removes it when
// done. A lock whose taker is gone is broken: moved aside under a name of our own (`.broken`) and
// checked to be the very lock judged stale (one moved by mistake is put back).
//
// "Gone" is a judgment: a holder that stalled (a paused container, SIGSTOP, a frozen VM) past the
// limit is judged gone while it is alive, and wakes up still believing it holds the lock. So a
// broken lock stays on disk as a mark until a later holder has made sure that what the stalled
// one may still do cannot harm (`takenOver`, `forgetTakeover`: for a blob, blobs.ts moves its
// partial file out of the stalled holder's reach), and a holder looks at its lock (`confirm`)
// before each step that depends on holding it.

export const LOCK_HEARTBEAT: Heartbeat = { everyMs: 2_000, staleMs: 30_000 };

/** A heartbeat that a holder gone silent for `staleMs` misses: a touch every fifteenth of it (2 s of 30 s). */
export const lockHeartbeat = (staleMs: number): Heartbeat => ({ everyMs: Math.max(1, Math.round(staleMs / 15)), staleMs });

/** The lock is no longer ours: another process broke it, judging this one gone (it had stalled that long). */
/** A lock this process held was taken over: what it guarded stopped; the client may try again (503). */
export class LockLostError extends HttpError {
  constructor(message: string) {
    super(503, "unavailable_error", "store_lock_lost", message, { "retry-after": "1" });
  }
}

export type HeldLock = {
  /** Aborts when another process broke the lock (it judged this one gone): what it guards must stop. */
  readonly lost: AbortSignal;
  /**
   * Whether some holder of this lock before us was judged gone and its lock broken, and no holder
   * since has said that what it may still write can no longer harm (it may be stalled, not dead).
   */
  readonly takenOver: boolean;
  /** Says that the holders judged gone can no longer harm what the lock guards: their marks go. */
  forgetTakeover(): Promise<void>;
  /**
   * Resolves while the lock is still ours, else rejects with a LockLostError. A look at the file
   * answers for a short while (`TRUSTED_FOR`) by our monotonic clock: a stall long enough for
   * another process to break the lock always makes the next call look again. `fresh`: look now.
   */
  confirm(options?: { fresh?: boolean }): Promise<void>;
  /** Removes the lock, if it is still ours. */
  release(): Promise<void>;
};

/** How long a look that found the lock ours answers `confirm`: a small part of the heartbeat, far below the limit. */
const TRUSTED_FOR = 1 / 4;

/** The marks that locks broken at `path` leave until a holder forgets them. */
async function brokenMarks(path: string): Promise<string[]> {
  const prefix = `${basename(path)}.`;
  let names: string[];
  try {
    names = await readdir(dirname(path));
  } catch (error) {
    if (isMissing(error)) return [];
    throw error;
  }
  return names.filter((n) => n.startsWith(prefix) && n.endsWith(".broken")).map((n) => join(dirname(path), n));
}

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
  const marks = await brokenMarks(path).catch(async (error: unknown) => {
    await removeIfPresent(path);
    throw error;
  });
  return held(path, owner, heartbeat, marks);
}

function held(path: string, owner: Owner, heartbeat: Heartbeat, marks: string[]): HeldLock {
  const lost = new AbortController();
  let released = false;
  let beating = false;
  let confirmedAt = performance.now();
  let looking: Promise<void> | undefined;
  const loseIt = () => {
    clearInterval(timer);
    if (!lost.signal.aborted) lost.abort(new LockLostError(`another process took over the store's lock on ${basename(path)}, judging this one gone (it stalled for ${heartbeat.staleMs / 1000} s or more)`));
  };
  /** Looks at the file: still ours, or lost (for good: a lock once broken is never ours again). */
  const look = () =>
    (looking ??= (async () => {
      const since = performance.now();
      try {
        if ((await sight(path))?.owner?.token === owner.token) confirmedAt = since;
        else if (!released) loseIt();
      } finally {
        looking = undefined;
      }
    })());
  const beat = async () => {
    if (beating || released) return;
    beating = true;
    try {
      await look();
      if (!lost.signal.aborted) {
        const now = new Date();
        await utimes(path, now, now);
      }
    } finally {
      beating = false;
    }
  };
  const timer = setInterval(() => void beat().catch(() => {}), heartbeat.everyMs);
  const ours = async () => (await sight(path))?.owner?.token === owner.token;
  return {
    lost: lost.signal,
    takenOver: marks.length > 0,
    async forgetTakeover() {
      await Promise.all(marks.splice(0).map(removeIfPresent));
    },
    async confirm({ fresh = false } = {}) {
      if (!lost.signal.aborted && (fresh || performance.now() - confirmedAt >= heartbeat.everyMs * TRUSTED_FOR)) await look();
      if (lost.signal.aborted) throw lost.signal.reason;
    },
    async release() {
      if (released) return;
      released = true;
      clearInterval(timer);
      if (await ours().catch(() => false)) await removeIfPresent(path);
    },
  };
}

/**
 * Breaks the lock at `path` if it is still the one whose owner had `token` (judged stale): it
 * stays aside as a mark of the takeover (see `takenOver`), unless its holder surely `exited`.
 */
async function breakLock(path: string, token: string | undefined, exited: boolean): Promise<void> {
  const aside = `${path}.${randomBytes(6).toString("hex")}.broken`;
  try {
    await rename(path, aside);
  } catch (error) {
    if (isMissing(error)) return; // another process broke it first
    throw error;
  }
  const moved = await sight(aside);
  if (!moved) return;
  if (moved.owner?.token === token) {
    // A holder that surely exited can write nothing more: no mark is needed.
    if (exited) await removeIfPresent(aside);
    return;
  }
  // Its holder released it and another took it between our look and the move: it goes back,
  // unless a third has taken the lock meanwhile (link, unlike rename, never replaces a file).
  await link(aside, path).catch(() => {});
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
      await breakLock(path, seen.owner?.token, holderExited(seen, judge));
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

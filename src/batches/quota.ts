import { HttpError } from "../http/errors.ts";
import type { FileRecord, FileStore } from "./files.ts";
import { inTurn } from "./in-turn.ts";

// What a key may keep in the file store, so that no key holder fills the disk the others share:
// a number of files and their bytes, counted over every file it owns (its uploads, and its
// batches' output and error files), whoever it is (admin keys, the Unix socket's `local` too:
// the disk bounds them as much). 0 is no bound. What is on its way to becoming a file counts as
// well, held in memory: an upload's bytes as they arrive, and a batch's room until it ends (two
// files, and its input's size or the bytes its results have taken, whichever is more).

export type FileLimits = {
  /** The largest upload. */
  maxBytes: number;
  /** How long an upload may send nothing before it is cut. */
  idleTimeoutMs: number;
  keyMaxFiles: number;
  keyMaxBytes: number;
};

type QuotaLimits = Pick<FileLimits, "keyMaxFiles" | "keyMaxBytes">;

/** Files and their bytes: what an owner holds, or is receiving. */
export type Holding = { files: number; bytes: number };

export const heldBy = (files: FileRecord[], owner: string): Holding =>
  files.filter((f) => f.owner === owner).reduce((sum, f) => ({ files: sum.files + 1, bytes: sum.bytes + f.bytes }), { files: 0, bytes: 0 });

export const plus = (a: Holding, b: Holding): Holding => ({ files: a.files + b.files, bytes: a.bytes + b.bytes });

/**
 * A quota frees only when its key deletes some of its files, or one of its batches ends: no time
 * to name in a Retry-After, and nothing a client's retry a few seconds later would find changed.
 * So the answer tells OpenAI's clients not to retry (they retry every 429 unless
 * `x-should-retry: false`), where a rate limit's 429 (keys/limits.ts) frees itself and says when.
 */
const quotaExceeded = (message: string, headers: Record<string, string> = {}) =>
  new HttpError(429, "rate_limit_error", "quota_exceeded", message, { ...headers, "x-should-retry": "false" });

/** What asks for room: an upload (one file, its bytes), or a batch (see BATCH_FILES). */
export type Asking = "upload" | "batch";

const WHY: Record<Asking, { files: string; bytes: string }> = {
  upload: { files: "delete some before uploading another", bytes: "and this upload would take it past that: delete some files first" },
  batch: {
    files: "and a batch holds room for its output and error files until it ends: delete some files, or wait for a batch to end",
    bytes: "and a batch holds room for its input's size again until it ends (its results take more if they need it): delete some files, or wait for a batch to end",
  },
};

/** The refusal of what `owner` would hold with `held` (what it asks for counted), or undefined if it stays within the limits. */
export function overQuota(owner: string, held: Holding, limits: QuotaLimits, headers?: Record<string, string>, asking: Asking = "upload"): HttpError | undefined {
  if (limits.keyMaxFiles > 0 && held.files > limits.keyMaxFiles) {
    return quotaExceeded(`${owner} may keep ${limits.keyMaxFiles} files (KEY_MAX_FILES), ${WHY[asking].files}`, headers);
  }
  if (limits.keyMaxBytes > 0 && held.bytes > limits.keyMaxBytes) {
    return quotaExceeded(`${owner} may keep ${limits.keyMaxBytes} bytes of files (KEY_MAX_FILE_BYTES), ${WHY[asking].bytes}`, headers);
  }
  return undefined;
}

/** The files a batch holds room for until it ends: its output and its error file. */
export const BATCH_FILES = 2;
/** A batch's room grows by at least this much at a time as its results outgrow it (one look at the store each time). */
export const ROOM_STEP = 1024 * 1024;

/** Room held in memory for `owner` until released; its bytes may grow. */
export type Hold = Holding & { release(): void };

/** A batch's room for its results, on its key's quota. */
export type ResultsRoom = {
  /** The bytes its results files already hold, found at a resume: counted, whatever the quota says now. */
  found(bytes: number): void;
  /** Takes room for `bytes` more results, growing the hold within the quota; false (nothing taken) when the quota has none. */
  take(bytes: number): Promise<boolean>;
  release(): void;
};

export type Quota = ReturnType<typeof createQuota>;

export function createQuota(files: Pick<FileStore, "list">, limits: QuotaLimits) {
  const holds = new Map<string, Set<Holding>>();
  // A check and the change it gates, one step per owner: two uploads, two batches, or an upload
  // and a batch's growth cannot both pass the last room.
  const turn = inTurn();
  /** What is held in memory for `owner`: its uploads under way, its batches not yet ended. */
  const holding = (owner: string): Holding => [...(holds.get(owner) ?? [])].reduce(plus, { files: 0, bytes: 0 });
  /** What `owner` keeps in the store. */
  const stored = async (owner: string): Promise<Holding> => heldBy(await files.list(), owner);
  /** What `owner` holds: its files kept, and what is held for it in memory. */
  const held = async (owner: string): Promise<Holding> => plus(await stored(owner), holding(owner));

  function hold(owner: string, start: Holding): Hold {
    const room: Hold = {
      ...start,
      release() {
        holds.get(owner)?.delete(room);
        if (holds.get(owner)?.size === 0) holds.delete(owner);
      },
    };
    holds.set(owner, (holds.get(owner) ?? new Set()).add(room));
    return room;
  }

  /**
   * A batch's room: BATCH_FILES files and `bytes` (its input's size) held at once, grown as its
   * results need more: by ROOM_STEP at a time, or what is left of the quota, never past it.
   */
  function resultsRoom(owner: string, bytes: number): ResultsRoom {
    const room = hold(owner, { files: BATCH_FILES, bytes });
    let written = 0;
    return {
      found(bytes) {
        written = bytes;
        room.bytes = Math.max(room.bytes, bytes);
      },
      async take(more) {
        // Within what it holds already: taken at once (before the write, so that two lines
        // written at once cannot both take the last of it).
        if (written + more <= room.bytes) {
          written += more;
          return true;
        }
        return turn(owner, async () => {
          // (Lines may take what is held meanwhile, while this looks at the store: `written` is read after.)
          if (limits.keyMaxBytes > 0 && written + more > room.bytes) {
            const left = limits.keyMaxBytes - ((await held(owner)).bytes - room.bytes);
            if (written + more > left) return false;
            room.bytes = Math.min(left, written + Math.max(more, ROOM_STEP));
          }
          written += more;
          room.bytes = Math.max(room.bytes, written);
          return true;
        });
      },
      release: () => room.release(),
    };
  }

  return { limits, turn, stored, holding, held, hold, resultsRoom };
}

/**
 * Refuses a batch of `owner`, who has `open` batches not yet ended: past the bound of them
 * (`perKey`, 0: none), or without room on its quota for what it will write.
 */
export async function admitBatch(quota: Quota, owner: string, { open, perKey, inputBytes }: { open: number; perKey: number; inputBytes: number }): Promise<void> {
  if (perKey > 0 && open >= perKey) {
    // A place frees when a batch ends (minutes to hours): OpenAI's clients, which retry a 429
    // within seconds unless told not to, are told not to.
    throw new HttpError(429, "rate_limit_error", "quota_exceeded", `this key has ${open} batches not yet ended, the most a key may have (BATCHES_PER_KEY): wait for one to end, or cancel one`, { "x-should-retry": "false" });
  }
  const full = overQuota(owner, plus(await quota.held(owner), { files: BATCH_FILES, bytes: inputBytes }), quota.limits, {}, "batch");
  if (full) throw full;
}

/** A batch's results found no room left on its key's file quota: it stops there. */
export class QuotaReached extends Error {
  constructor(owner: string, maxBytes: number) {
    super(`${owner} may keep ${maxBytes} bytes of files (KEY_MAX_FILE_BYTES): this batch's results reached that, and it stopped there; the results written are in its output and error files (a line whose result did not fit has none)`);
  }
}

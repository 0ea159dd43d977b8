import { HttpError } from "../http/errors.ts";
import type { FileRecord } from "./files.ts";

// What a key may keep in the file store, so that no key holder fills the disk the others share:
// a number of files and their bytes, counted over every file it owns (its uploads, and its
// batches' output and error files), whoever it is (admin keys, the Unix socket's `local` too:
// the disk bounds them as much). 0 is no bound.

export type FileLimits = {
  /** The largest upload. */
  maxBytes: number;
  /** How long an upload may send nothing before it is cut. */
  idleTimeoutMs: number;
  keyMaxFiles: number;
  keyMaxBytes: number;
};

/** Files and their bytes: what an owner holds, or is receiving. */
export type Holding = { files: number; bytes: number };

export const heldBy = (files: FileRecord[], owner: string): Holding =>
  files.filter((f) => f.owner === owner).reduce((sum, f) => ({ files: sum.files + 1, bytes: sum.bytes + f.bytes }), { files: 0, bytes: 0 });

export const plus = (a: Holding, b: Holding): Holding => ({ files: a.files + b.files, bytes: a.bytes + b.bytes });

/**
 * A quota frees only when its key deletes some of its files (they never expire): no time to name
 * in a Retry-After, and nothing a client's retry a few seconds later would find changed. So the
 * answer tells OpenAI's clients not to retry (they retry every 429 unless `x-should-retry: false`),
 * where a rate limit's 429 (keys/limits.ts) frees itself and says when.
 */
const quotaExceeded = (message: string, headers: Record<string, string> = {}) =>
  new HttpError(429, "rate_limit_error", "quota_exceeded", message, { ...headers, "x-should-retry": "false" });

/** The refusal of what `owner` would hold with `held` (one more file and its bytes counted), or undefined if it stays within the limits. */
export function overQuota(owner: string, held: Holding, limits: Pick<FileLimits, "keyMaxFiles" | "keyMaxBytes">, headers?: Record<string, string>): HttpError | undefined {
  if (limits.keyMaxFiles > 0 && held.files > limits.keyMaxFiles) {
    return quotaExceeded(`${owner} may keep ${limits.keyMaxFiles} files (KEY_MAX_FILES): delete some before uploading another`, headers);
  }
  if (limits.keyMaxBytes > 0 && held.bytes > limits.keyMaxBytes) {
    return quotaExceeded(`${owner} may keep ${limits.keyMaxBytes} bytes of files (KEY_MAX_FILE_BYTES), and this upload would take it past that: delete some files first`, headers);
  }
  return undefined;
}

import { randomBytes } from "node:crypto";
import { mkdir, open, readdir } from "node:fs/promises";
import { join } from "node:path";
import type { BatchEndpoint, LineError } from "./lines.ts";

// A batch's record, as OpenAI's Batch API shows it and as it is kept (`<id>.json`): its fields, the
// ones only we keep (its owner, its times in ms), and a new one as created.

export type BatchStatus = "validating" | "failed" | "in_progress" | "finalizing" | "completed" | "expired" | "cancelling" | "cancelled";

export type Batch = {
  id: string;
  object: "batch";
  endpoint: BatchEndpoint;
  errors: { object: "list"; data: LineError[] } | null;
  input_file_id: string;
  completion_window: string;
  status: BatchStatus;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  in_progress_at: number | null;
  expires_at: number;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  expired_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
  request_counts: { total: number; completed: number; failed: number };
  metadata: Record<string, string> | null;
  owner: string;
  /** When it was created, in ms: the order batches take their turns in (records from before it have none). */
  created_ms?: number;
  /** When it ended, in ms: which of its key's ended batches are the latest (records from before it have none). */
  ended_ms?: number;
};

/** What a batch's creator asks for. */
export type BatchFields = { input_file_id: string; endpoint: BatchEndpoint; completion_window: string; metadata: Record<string, string> | null };

/**
 * The most a record's file may hold to be read: far above what ours write (100 listed errors,
 * 16 pairs of metadata: tens of KiB), so that a file grown by hand is not read whole at start.
 */
export const RECORD_LIMIT = 1024 * 1024;

/** How long a batch may take: OpenAI's one completion window. */
const WINDOW_S = 24 * 3600;

/** The statuses a batch ends in. */
export const FINISHED: BatchStatus[] = ["failed", "completed", "expired", "cancelled"];

/** A record as its API shows it: without what only we keep. */
export const shownBatch = ({ owner: _, created_ms: __, ended_ms: ___, ...batch }: Batch) => batch;

/** When it was created, in ms (a record from before `created_ms` was kept: its second). */
export const createdMs = (batch: Batch) => batch.created_ms ?? batch.created_at * 1000;

/** A new batch of `owner`, created at `createdMs`, validating. */
export function newBatch(owner: string, fields: BatchFields, createdMs: number): Batch {
  const created = Math.floor(createdMs / 1000);
  return {
    id: `batch_${randomBytes(12).toString("hex")}`,
    object: "batch",
    ...fields,
    errors: null,
    status: "validating",
    output_file_id: null,
    error_file_id: null,
    created_at: created,
    in_progress_at: null,
    expires_at: created + WINDOW_S,
    finalizing_at: null,
    completed_at: null,
    failed_at: null,
    expired_at: null,
    cancelling_at: null,
    cancelled_at: null,
    request_counts: { total: 0, completed: 0, failed: 0 },
    owner,
    created_ms: createdMs,
  };
}

/**
 * The records kept in `dir` (made if missing), oldest first: the order batches take their turns in.
 * A file that is not a record (unreadable, cut short, edited by hand) is left out and named in the
 * log, where it stopped every other batch from loading.
 */
export async function keptIn(dir: string): Promise<Batch[]> {
  await mkdir(dir, { recursive: true });
  const kept: Batch[] = [];
  for (const name of (await readdir(dir)).filter((n) => n.endsWith(".json"))) {
    const file = join(dir, name);
    const record = recordIn((await textWithin(file, RECORD_LIMIT).catch(() => undefined)) ?? "");
    if (record) kept.push(record);
    else console.error(`batches: ${file} is not a batch's record; left out (fix or remove it)`);
  }
  return kept.sort((a, b) => createdMs(a) - createdMs(b) || (a.id < b.id ? -1 : 1));
}

/** A file's text, read no further than `limit` bytes: undefined if it holds more. */
async function textWithin(file: string, limit: number): Promise<string | undefined> {
  const handle = await open(file, "r");
  try {
    const buffer = Buffer.allocUnsafe(limit + 1);
    let size = 0;
    while (size <= limit) {
      const { bytesRead } = await handle.read(buffer, size, limit + 1 - size, null);
      if (bytesRead === 0) return buffer.toString("utf8", 0, size);
      size += bytesRead;
    }
    return undefined;
  } finally {
    await handle.close();
  }
}

/** `text` as a record, if it is one: the fields every batch is found and ordered by. */
function recordIn(text: string): Batch | undefined {
  try {
    const record = JSON.parse(text) as Partial<Batch> | null;
    const isRecord = typeof record?.id === "string" && typeof record.status === "string" && typeof record.created_at === "number" && typeof record.owner === "string";
    return isRecord ? (record as Batch) : undefined;
  } catch {
    return undefined;
  }
}

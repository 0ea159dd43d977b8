import { readFileSync, renameSync } from "node:fs";
import { writeFileAtomic } from "../../models/store/files.ts";

// Usage per key name, model and day (UTC): requests, prompt and completion tokens (and the part of
// the prompt's that llama-server took from its cache rather than processed), errors. Kept in
// memory and written to one small JSON file at most once a second after a change, to a temporary
// name and renamed over the old (a crash leaves the old or the new file, never half of one). A
// restart reads it back: at most the last second's counts are lost with the process.
//
// The ledger is bounded, as the file is rewritten whole: rows older than `keepDays` days go when
// the day changes (and at start), and past `maxRows` rows the oldest go first (rows are kept in
// the order they were made, which is day order). What went is counted (`dropped`), not kept.

/** `cached_tokens`: the part of `prompt_tokens` read from a slot's cache, not processed (the saving of a returning turn). */
export type UsageCounts = { requests: number; prompt_tokens: number; cached_tokens: number; completion_tokens: number; errors: number };
export type UsageRow = { day: string; key: string; model: string } & UsageCounts;
export type UsageFilter = { key?: string; model?: string; day?: string; since?: string; until?: string };

export type LedgerBounds = {
  /** Rows kept at most; the oldest go first. */
  maxRows: number;
  /** Days kept, today included; older rows go when the day changes. */
  keepDays: number;
};

export interface Ledger {
  add(key: string, model: string, counts: Partial<UsageCounts>): void;
  /** The rows that match, oldest day first. */
  rows(filter?: UsageFilter): UsageRow[];
  /** Writes what is not written yet; resolves once it is on disk. */
  flush(): Promise<void>;
  /** Rows dropped by the bounds since start, by why (too old, or one too many). */
  dropped(): Record<DropReason, number>;
}

export type DropReason = "age" | "rows";

const FILE_VERSION = 1;
const WRITE_DELAY_MS = 1000;
const DAY_MS = 86_400_000;

const EMPTY: UsageCounts = { requests: 0, prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, errors: 0 };

/**
 * The ledger kept in `path`, read back from it once, at start (a missing file is an empty ledger;
 * one that cannot be read is moved aside, told, and started afresh: usage never stops the server).
 */
export function openLedger(path: string, bounds: LedgerBounds, now: () => number = () => Date.now()): Ledger {
  // Oldest day first, as rows made from now on follow: the map's first row is always the oldest.
  const read = readRows(path).sort((a, b) => a.day.localeCompare(b.day));
  const rows = new Map<string, UsageRow>(read.map((row) => [rowKey(row.day, row.key, row.model), row]));
  const dropped: Record<DropReason, number> = { age: 0, rows: 0 };
  const drop = (id: string, reason: DropReason) => {
    rows.delete(id);
    if (dropped.age + dropped.rows === 0) console.error(`usage: rows dropped (${reason === "age" ? `older than USAGE_KEEP_DAYS=${bounds.keepDays}` : `past USAGE_MAX_ROWS=${bounds.maxRows}`}); counted in /metrics as llamadock_usage_rows_dropped_total`);
    dropped[reason]++;
    dirty = true;
  };
  let timer: ReturnType<typeof setTimeout> | undefined;
  let writing: Promise<void> = Promise.resolve();
  let dirty = false;
  const write = () => {
    timer = undefined;
    if (!dirty) return writing;
    dirty = false;
    const text = JSON.stringify({ version: FILE_VERSION, rows: [...rows.values()] });
    // One write at a time, in order; a failed write is told and tried again with the next change.
    writing = writing.then(() =>
      writeFileAtomic(path, text, { durable: false }).catch((error: Error) => {
        dirty = true;
        console.error(`usage: cannot write ${path}: ${error.message}`);
      }),
    );
    return writing;
  };
  // The day's name, made again only when the day changes (toISOString per request showed in profiles).
  let dayNumber = Number.NaN;
  let dayName = "";
  const today = () => {
    const number = Math.floor(now() / DAY_MS);
    if (number !== dayNumber) {
      [dayNumber, dayName] = [number, new Date(number * DAY_MS).toISOString().slice(0, 10)];
      dropOlderThan(new Date((number - bounds.keepDays + 1) * DAY_MS).toISOString().slice(0, 10));
    }
    return dayName;
  };
  const dropOlderThan = (first: string) => {
    for (const [id, row] of rows) if (row.day < first) drop(id, "age");
  };
  // A file from before a bound was lowered is held to it at once.
  const trim = () => {
    while (rows.size > bounds.maxRows) drop(rows.keys().next().value!, "rows");
  };
  today();
  trim();
  return {
    add(key, model, counts) {
      const day = today();
      const id = rowKey(day, key, model);
      let row = rows.get(id);
      if (!row) {
        rows.set(id, (row = { day, key, model, ...EMPTY }));
        // The map's first row is the oldest (made first); never the one just made, as maxRows >= 1.
        trim();
      }
      // Field by field, not a loop over the names: each request adds a row's counts.
      row.requests += counts.requests ?? 0;
      row.prompt_tokens += counts.prompt_tokens ?? 0;
      row.cached_tokens += counts.cached_tokens ?? 0;
      row.completion_tokens += counts.completion_tokens ?? 0;
      row.errors += counts.errors ?? 0;
      dirty = true;
      // Unref'd: a pending write never keeps the process up (flush at stop writes it).
      if (!timer) (timer = setTimeout(write, WRITE_DELAY_MS)).unref?.();
    },
    rows(filter = {}) {
      return [...rows.values()]
        .filter((r) => (filter.key === undefined || r.key === filter.key) && (filter.model === undefined || r.model === filter.model))
        .filter((r) => (filter.day === undefined || r.day === filter.day) && (!filter.since || r.day >= filter.since) && (!filter.until || r.day <= filter.until))
        .sort((a, b) => a.day.localeCompare(b.day) || a.key.localeCompare(b.key) || a.model.localeCompare(b.model));
    },
    flush() {
      clearTimeout(timer);
      return write();
    },
    dropped: () => ({ ...dropped }),
  };
}

const rowKey = (day: string, key: string, model: string) => `${day}\u0000${key}\u0000${model}`;

function readRows(path: string): UsageRow[] {
  try {
    const parsed = JSON.parse(readFileSync(path, "utf8")) as { version?: number; rows?: UsageRow[] };
    if (parsed.version !== FILE_VERSION || !Array.isArray(parsed.rows)) throw new Error(`not a usage file of version ${FILE_VERSION}`);
    return parsed.rows.map((r) => ({ ...EMPTY, ...r }));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    const aside = `${path}.unreadable`;
    console.error(`usage: ${path} cannot be read (${(error as Error).message}); moved to ${aside}, counting afresh`);
    try {
      renameSync(path, aside);
    } catch {
      // not there to move, or not ours to move: counting afresh all the same
    }
    return [];
  }
}

/** Rows summed by the fields named (the others dropped). */
export function totals<K extends "day" | "key" | "model">(rows: UsageRow[], by: K[]): (Pick<UsageRow, K> & UsageCounts)[] {
  const out = new Map<string, Pick<UsageRow, K> & UsageCounts>();
  for (const row of rows) {
    const id = by.map((field) => row[field]).join("\u0000");
    let sum = out.get(id);
    if (!sum) {
      sum = { ...(Object.fromEntries(by.map((field) => [field, row[field]])) as Pick<UsageRow, K>), ...EMPTY };
      out.set(id, sum);
    }
    for (const field of Object.keys(EMPTY) as (keyof UsageCounts)[]) sum[field] += row[field];
  }
  return [...out.values()];
}

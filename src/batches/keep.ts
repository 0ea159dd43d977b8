import type { Batch } from "./record.ts";

// How long ended batches are kept, as a pure policy: a record is read back whole at start and held
// in memory, so neither their age nor their number per key grows without bound. The latest are
// those that ended last (one that ran long and has just ended is kept, not the first to end after
// it was created).

export type Keeping = {
  /** How long an ended batch's record is kept, in ms. */
  keepMs: number;
  /** Ended batches kept per key, the latest ended (0: no bound). */
  keptPerKey: number;
};

const createdMs = (batch: Batch) => batch.created_ms ?? batch.created_at * 1000;

/** When the batch ended, in ms (records from before `ended_ms` was kept: their last status's second). */
export const endedMs = (batch: Batch) =>
  batch.ended_ms ?? (Math.max(batch.completed_at ?? 0, batch.failed_at ?? 0, batch.cancelled_at ?? 0, batch.expired_at ?? 0) || batch.created_at) * 1000;

/** Of `ended` (batches ended, their results handed over), those that go at `now`: past the keep, or past their key's latest `keptPerKey`. */
export function pastKeeping(ended: Batch[], { keepMs, keptPerKey }: Keeping, now: number): Batch[] {
  const old = ended.filter((b) => endedMs(b) + keepMs <= now);
  const byOwner = new Map<string, Batch[]>();
  for (const batch of ended.filter((b) => !old.includes(b))) byOwner.set(batch.owner, [...(byOwner.get(batch.owner) ?? []), batch]);
  const beyond = keptPerKey === 0 ? [] : [...byOwner.values()].flatMap((own) => own.sort((a, b) => endedMs(b) - endedMs(a) || createdMs(b) - createdMs(a)).slice(keptPerKey));
  return [...old, ...beyond];
}

import { describe, expect, it } from "vitest";
import type { Batch } from "../../src/batches/record.ts";
import { endedMs, pastKeeping } from "../../src/batches/keep.ts";

// Which ended batches' records go, as a pure policy (the engine drops them: engine.test.ts; through
// the server: limits.test.ts).

const batch = (id: string, owner: string, createdMs: number, endedAt: number | undefined): Batch =>
  ({ id, owner, status: "completed", created_at: Math.floor(createdMs / 1000), created_ms: createdMs, completed_at: null, ...(endedAt !== undefined ? { ended_ms: endedAt } : {}) }) as unknown as Batch;
const ids = (batches: Batch[]) => batches.map((b) => b.id).sort();

describe("pastKeeping", () => {
  it("drops what ended longer ago than the keep (reaching it is enough)", () => {
    const ended = [batch("old", "a", 0, 1000), batch("edge", "a", 0, 5000), batch("new", "a", 0, 5001)];
    expect(ids(pastKeeping(ended, { keepMs: 5000, keptPerKey: 0 }, 10_000))).toEqual(["edge", "old"]);
  });

  it("keeps each key's latest to end, whenever they were created; another key's are its own", () => {
    const ended = [batch("long", "a", 0, 900), batch("q0", "a", 100, 200), batch("q1", "a", 300, 400), batch("b0", "b", 50, 60)];
    expect(ids(pastKeeping(ended, { keepMs: 10_000, keptPerKey: 2 }, 1000))).toEqual(["q0"]);
    expect(ids(pastKeeping(ended, { keepMs: 10_000, keptPerKey: 0 }, 1000))).toEqual([]);
    // Those past the keep are not counted among the kept.
    expect(ids(pastKeeping(ended, { keepMs: 700, keptPerKey: 1 }, 1000))).toEqual(["b0", "q0", "q1"]);
  });

  it("records from before ended_ms: their last status's time, else their creation", () => {
    const legacy = { ...batch("x", "a", 4000, undefined), failed_at: 7, cancelled_at: 9 } as Batch;
    expect(endedMs(legacy)).toBe(9000);
    expect(endedMs(batch("y", "a", 4000, undefined))).toBe(4000);
  });
});

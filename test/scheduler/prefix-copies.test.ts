import { describe, expect, it } from "vitest";
import { PrefixCopies } from "../../src/scheduler/prefix-copies.ts";
import type { SlotCopy } from "../../src/scheduler/types.ts";

// The copies followers restore, against a recording fake of the runner's slot save and restore.

function recorder() {
  const log: string[] = [];
  const copySlot = async (from: number): Promise<SlotCopy> => {
    log.push(`save ${from}`);
    return {
      restore: async (slot) => (log.push(`restore ${from}->${slot}`), true),
      drop: async () => void log.push(`drop ${from}`),
    };
  };
  return { log, copies: new PrefixCopies(copySlot) };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 0));
const never = new AbortController().signal;

describe("copies of a slot for its followers", () => {
  it("followers wait for their leader to end, then restore one copy each; the copy goes after the last", async () => {
    const { log, copies } = recorder();
    copies.lead(0);
    const b = copies.follow(0, 1)(never);
    const c = copies.follow(0, 2)(never);
    await tick();
    expect(log).toEqual([]);
    copies.ended(0);
    expect(await Promise.all([b, c])).toEqual([true, true]);
    await tick();
    expect(log).toEqual(["save 0", "restore 0->1", "restore 0->2", "drop 0"]);
  });

  it("a follower whose client leaves gives its place up; the copy still goes after the others", async () => {
    const { log, copies } = recorder();
    copies.lead(0);
    const leaving = new AbortController();
    const b = copies.follow(0, 1)(leaving.signal);
    const c = copies.follow(0, 2)(never);
    leaving.abort(new Error("gone"));
    await expect(b).rejects.toThrow("gone");
    copies.ended(0);
    expect(await c).toBe(true);
    await tick();
    expect(log).toEqual(["save 0", "restore 0->2", "drop 0"]);
  });

  it("a free slot (no leader running there) is copied at once", async () => {
    const { log, copies } = recorder();
    expect(await copies.follow(1, 2)(never)).toBe(true);
    await tick();
    expect(log).toEqual(["save 1", "restore 1->2", "drop 1"]);
  });

  it("a runner that cannot copy slots: the follower goes on at once, with nothing restored", async () => {
    expect(await new PrefixCopies(undefined).follow(0, 1)(never)).toBe(false);
  });
});

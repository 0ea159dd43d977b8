import { describe, expect, it } from "vitest";
import { PrefixCopies } from "../../src/scheduler/prefix-copies.ts";
import type { SlotCopy, SlotParking } from "../../src/scheduler/types.ts";

// The copies followers restore, against a recording fake of the runner's slot save and restore.

function recorder(parks: { saves?: boolean; restores?: boolean; before?: string[] } = {}) {
  const log: string[] = [];
  let saving: (() => void) | undefined;
  const parking: SlotParking = {
    park: async (slot, session) => {
      log.push(`park ${slot} as ${session}`);
      await new Promise<void>((resolve) => (saving = resolve));
      log.push(`parked ${session}`);
      return parks.saves ?? true;
    },
    unpark: async (session, slot) => (log.push(`unpark ${session}->${slot}`), parks.restores ?? true),
    keeps: (session) => (parks.before ?? []).includes(session),
  };
  const copySlot = async (from: number): Promise<SlotCopy> => {
    log.push(`save ${from}`);
    return {
      restore: async (slot) => (log.push(`restore ${from}->${slot}`), true),
      drop: async () => void log.push(`drop ${from}`),
    };
  };
  return { log, copies: new PrefixCopies(copySlot, parking), saved: () => saving?.() };
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

describe("parking, before a placed request is sent", () => {
  it("the displaced conversation is saved first, then the session's own restored; no copy of the start is made", async () => {
    const { log, copies, saved } = recorder();
    // b displaced a (parked), then a comes back to slot 1, which holds c: c is parked, a unparked.
    const first = copies.prepare({ kind: "take", slot: 0, lead: false, park: "a" });
    await tick();
    saved();
    await first.ready!(never);
    const back = copies.prepare({ kind: "follow", slot: 1, from: 0, park: "c", unpark: "a" });
    await tick();
    expect(log).toEqual(["park 0 as a", "parked a", "park 1 as c"]);
    saved();
    expect(await back.ready!(never)).toBe(true);
    await tick();
    expect(log).toEqual(["park 0 as a", "parked a", "park 1 as c", "parked c", "unpark a->1"]);
  });

  it("a session back while its conversation is still being saved waits for that save", async () => {
    const { log, copies, saved } = recorder();
    copies.prepare({ kind: "take", slot: 0, lead: false, park: "a" });
    const back = copies.prepare({ kind: "take", slot: 1, lead: false, unpark: "a" }).ready!(never);
    await tick();
    expect(log).toEqual(["park 0 as a"]);
    saved();
    expect(await back).toBe(true);
    expect(log).toEqual(["park 0 as a", "parked a", "unpark a->1"]);
  });

  it("an unpark that fails falls back to the copy of the start", async () => {
    const { log, copies, saved } = recorder({ restores: false });
    copies.prepare({ kind: "take", slot: 0, lead: false, park: "a" });
    saved();
    await tick();
    expect(await copies.prepare({ kind: "follow", slot: 1, from: 0, unpark: "a" }).ready!(never)).toBe(true);
    await tick();
    expect(log).toEqual(["park 0 as a", "parked a", "unpark a->1", "save 0", "restore 0->1", "drop 0"]);
  });

  it("a save that failed is never restored: the session processes its conversation again", async () => {
    const { log, copies, saved } = recorder({ saves: false });
    copies.prepare({ kind: "take", slot: 0, lead: false, park: "a" });
    saved();
    expect(await copies.prepare({ kind: "take", slot: 1, lead: false, unpark: "a" }).ready!(never)).toBe(false);
    expect(log).toEqual(["park 0 as a", "parked a"]);
  });

  it("a session parked before the runner loaded (a restart) is unparked at once, with no save of this runner's to wait for", async () => {
    const { log, copies } = recorder({ before: ["a"] });
    expect(await copies.prepare({ kind: "follow", slot: 1, from: 0, unpark: "a" }).ready!(never)).toBe(true);
    expect(log).toEqual(["unpark a->1"]);
  });

  it("a session neither this runner nor an earlier one parked is not unparked: the copy of its start", async () => {
    const { log, copies } = recorder({ before: ["b"] });
    expect(await copies.prepare({ kind: "follow", slot: 1, from: 0, unpark: "a" }).ready!(never)).toBe(true);
    await tick();
    expect(log).toEqual(["save 0", "restore 0->1", "drop 0"]);
  });

  it("a runner without parking: the copy as before", async () => {
    const log: string[] = [];
    const copies = new PrefixCopies(async (from) => (log.push(`save ${from}`), { restore: async () => true, drop: async () => {} }));
    expect(await copies.prepare({ kind: "follow", slot: 1, from: 0, unpark: "a" }).ready!(never)).toBe(true);
    expect(log).toEqual(["save 0"]);
  });
});

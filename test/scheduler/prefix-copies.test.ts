import { describe, expect, it } from "vitest";
import type { Turn } from "../../src/scheduler/fair-queue.ts";
import type { Lease } from "../../src/scheduler/lease.ts";
import { PrefixCopies } from "../../src/scheduler/prefix-copies.ts";
import { SessionSlots } from "../../src/scheduler/session-slots.ts";
import type { RunnerProcess, SlotCopy, SlotParking } from "../../src/scheduler/types.ts";

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

  it("a request left to llama-server waits while a slot is parked, which it could otherwise run on before the save", async () => {
    const { log, copies, saved } = recorder();
    const taking = copies.prepare({ kind: "take", slot: 0, lead: false, park: "a" });
    const anywhere = copies.prepare({ kind: "any" });
    expect(anywhere.ready).toBeDefined();
    let sent = false;
    const waiting = anywhere.ready!(never).then(() => (sent = true));
    await tick();
    expect([log, sent]).toEqual([["park 0 as a"], false]);
    saved();
    await waiting;
    await taking.ready!(never);
    expect([log, sent]).toEqual([["park 0 as a", "parked a"], true]);
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

// llama-server's slots as far as copies go: what each holds; requests on their way to it, which
// HTTP lets arrive in any order (here the worst: a request sent after a save arrives before it);
// a save of a slot that runs a request waiting until that ends (llama-server defers it).
function slotServer(count: number) {
  const slots = Array.from({ length: count }, () => ({ holds: "", busy: false }));
  let onTheWay: { save: boolean; arrive: () => void }[] = [];
  let deferred: { slot: number; save: () => void }[] = [];
  const restored: string[] = [];
  const saveIdle = () => {
    const waiting = deferred;
    deferred = [];
    for (const save of waiting) (slots[save.slot]!.busy ? deferred.push(save) : save.save());
  };
  const process: RunnerProcess = {
    fetch: (async () => new Response("ok")) as unknown as typeof fetch,
    exited: new Promise<Error>(() => {}),
    running: () => true,
    stop: async () => {},
    kill: async () => {},
    copySlot: (from) =>
      new Promise<SlotCopy>((resolve) => {
        const save = () => {
          const saved = slots[from]!.holds;
          resolve({ restore: async (into) => ((slots[into]!.holds = saved), restored.push(`${saved} -> ${into}`), true), drop: async () => {} });
        };
        onTheWay.push({ save: true, arrive: () => (deferred.push({ slot: from, save }), saveIdle()) });
      }),
  };
  /**
   * A leased request as forward.ts sends it: what precedes it first, then on its way; once
   * arrived it runs on its slot (llama-server's pick, the first idle one, where none is named)
   * with `prompt` until `end()`.
   */
  const send = async (lease: Lease, prompt: string): Promise<() => void> => {
    await lease.ready?.(never);
    const slot = await new Promise<(typeof slots)[number]>((resolve) =>
      onTheWay.push({
        save: false,
        arrive: () => {
          const slot = slots[lease.slot ?? slots.findIndex((s) => !s.busy)]!;
          slot.busy = true;
          slot.holds = prompt;
          resolve(slot);
        },
      }),
    );
    return () => {
      slot.busy = false;
      saveIdle();
      lease.release();
    };
  };
  /** Lets what is on its way arrive, requests before saves, a few times over. */
  const flow = async () => {
    for (let i = 0; i < 5; i++) {
      await tick();
      const arriving = onTheWay.sort((a, b) => Number(a.save) - Number(b.save));
      onTheWay = [];
      for (const message of arriving) message.arrive();
    }
  };
  return { process, slots, send, flow, restored };
}

describe("a slot being copied for followers is given to no other request until it is saved", () => {
  const turn = (session: string, prefix: string): Turn => ({ caller: "key", lane: "interactive", session, prefix });
  const unnamed: Turn = { caller: "key", lane: "interactive" };
  function runner() {
    const server = slotServer(2);
    const slots = new SessionSlots(2, 0);
    slots.loaded(server.process);
    const lease = (asked: Turn, released = () => {}) => slots.lease(asked, server.process, never, undefined, released);
    return { ...server, lease };
  }

  // Regression: the leader's slot, handed to the next session the moment the leader ended, could
  // be sent that session's request before the follower's save of it reached llama-server, which
  // then saved that session's conversation (once its answer ended) for the follower, not the start.
  it("the leader's slot handed to a waiting session as the leader ends: the follower still restores the start", async () => {
    const { lease, send, flow, restored, slots } = runner();
    let next: Promise<() => void> | undefined;
    // The runner grants the waiting session at the leader's release, in the same step (runner.ts).
    const leader = lease(turn("a", "P"), () => (next = send(lease(turn("c", "Q")), "Q c")));
    expect(leader.slot).toBe(0);
    const leading = send(leader, "P a");
    await flow();
    const endLeader = await leading;
    const follower = lease(turn("b", "P"));
    expect(follower.slot).toBe(1);
    const followed = send(follower, "P b");
    await flow();
    endLeader();
    await flow();
    (await next!)();
    await flow();
    (await followed)();
    expect(restored).toEqual(["P a -> 1"]);
    expect(slots.map((s) => s.holds)).toEqual(["Q c", "P b"]);
  });

  it("a free slot being copied: its own session's next turn is sent once the copy is saved", async () => {
    const { lease, send, flow, restored } = runner();
    const first = send(lease(turn("a", "P")), "P a");
    await flow();
    (await first)();
    const followed = send(lease(turn("b", "P")), "P b");
    const back = lease(turn("a", "P"));
    expect(back.slot).toBe(0);
    const returned = send(back, "P a more");
    await flow();
    (await returned)();
    await flow();
    (await followed)();
    expect(restored).toEqual(["P a -> 1"]);
  });

  it("a follower that unparks holds the slot it would copy from until its unpark is done, and then copies nothing", async () => {
    const { log, copies, saved } = recorder();
    copies.prepare({ kind: "take", slot: 2, lead: false, park: "a" });
    const back = copies.prepare({ kind: "follow", slot: 1, from: 0, unpark: "a" }).ready!(never);
    let sent = false;
    const other = copies.prepare({ kind: "own", slot: 0 }).ready!(never).then(() => (sent = true));
    await tick();
    expect(sent).toBe(false);
    saved();
    expect(await back).toBe(true);
    await other;
    expect(log).toEqual(["park 2 as a", "parked a", "unpark a->1"]);
  });

  it("a save that fails frees its slot all the same: the follower processes its start, the other request goes on", async () => {
    const copies = new PrefixCopies(async () => Promise.reject(new Error("refused")));
    const follower = copies.prepare({ kind: "follow", slot: 1, from: 0 });
    const other = copies.prepare({ kind: "own", slot: 0 });
    expect(await follower.ready!(never)).toBe(false);
    await other.ready!(never);
    expect(copies.prepare({ kind: "own", slot: 0 }).ready).toBeUndefined();
  });

  // llama-server takes back one deferred task per slot it frees: a second save of a slot deferred
  // beside the first would wait for another slot to end.
  it("saves of one slot go one at a time: the next session's parking of the leader's slot waits for the followers' copy", async () => {
    const log: string[] = [];
    let copied = () => {};
    const copySlot = async (from: number): Promise<SlotCopy> => {
      log.push(`save ${from}`);
      await new Promise<void>((resolve) => (copied = resolve));
      log.push(`saved ${from}`);
      return { restore: async (slot) => (log.push(`restore ${from}->${slot}`), true), drop: async () => {} };
    };
    const copies = new PrefixCopies(copySlot, { park: async (slot, session) => (log.push(`park ${slot} as ${session}`), true), unpark: async () => false, keeps: () => false });
    copies.lead(0);
    const followed = copies.follow(0, 1)(never);
    copies.ended(0);
    const next = copies.prepare({ kind: "take", slot: 0, lead: true, park: "a" }).ready!(never);
    await tick();
    expect(log).toEqual(["save 0"]);
    copied();
    await Promise.all([followed, next]);
    expect(log.slice(0, 2)).toEqual(["save 0", "saved 0"]);
    expect(log.slice(2).sort()).toEqual(["park 0 as a", "restore 0->1"]);
  });

  it("a request left to llama-server, which may pick the slot being copied, is sent once the copy is saved", async () => {
    const { lease, send, flow, restored } = runner();
    const first = send(lease(turn("a", "P")), "P a");
    await flow();
    (await first)();
    const followed = send(lease(turn("b", "P")), "P b");
    const other = lease(unnamed);
    expect(other.slot).toBeUndefined();
    const sent = send(other, "Q x");
    await flow();
    (await sent)();
    await flow();
    (await followed)();
    expect(restored).toEqual(["P a -> 1"]);
  });
});

import { describe, expect, it } from "vitest";
import { FairQueue, SHARED_WINDOW_MS, type Clock, type Turn } from "../../src/scheduler/fair-queue.ts";

// The fair queue as a table: requests pushed as `caller:id` (`caller:id!` in the batch lane),
// then every grant's order. Each row is one story of a runner's queue.

const turn = (item: string): Turn => ({ caller: item.split(":")[0]!, lane: item.endsWith("!") ? "batch" : "interactive" });

/** Pushes `before`, grants `grants` items, pushes `after`, then grants to the end (one place: each grant ends before the next). */
function served(before: string[], grants = 0, after: string[] = []): string[] {
  const queue = new FairQueue<string>();
  const out: string[] = [];
  const grant = () => {
    const item = queue.shift(1);
    if (item !== undefined) queue.release(turn(item).caller, turn(item).lane);
    return item;
  };
  for (const item of before) queue.push(item, turn(item));
  for (let i = 0; i < grants; i++) out.push(grant()!);
  for (const item of after) queue.push(item, turn(item));
  for (let item = grant(); item !== undefined; item = grant()) out.push(item);
  expect(queue.length).toBe(0);
  return out;
}

describe("the fair queue", () => {
  it.each([
    ["one caller: first come, first served", ["a:1", "a:2", "a:3"], 0, [], ["a:1", "a:2", "a:3"]],
    ["two callers alternate, each in its own order", ["a:1", "a:2", "a:3", "b:1", "b:2"], 0, [], ["a:1", "b:1", "a:2", "b:2", "a:3"]],
    ["a late caller goes before the flood's next", ["a:1", "a:2", "a:3", "a:4"], 2, ["b:1"], ["a:1", "a:2", "b:1", "a:3", "a:4"]],
    ["the least recently served goes first", ["a:1", "b:1", "c:1", "a:2", "b:2", "c:2"], 3, ["c:3"], ["a:1", "b:1", "c:1", "a:2", "b:2", "c:2", "c:3"]],
    ["three callers, one flooding", ["f:1", "f:2", "f:3", "f:4", "x:1", "y:1"], 0, [], ["f:1", "x:1", "y:1", "f:2", "f:3", "f:4"]],
    ["batch waits while any interactive request waits", ["a:1!", "a:2!", "b:1", "c:1"], 0, [], ["b:1", "c:1", "a:1!", "a:2!"]],
    ["an interactive request that comes later still goes before batch", ["a:1!", "a:2!"], 1, ["b:1"], ["a:1!", "b:1", "a:2!"]],
    ["batch lines are fair across callers too", ["a:1!", "a:2!", "b:1!"], 0, [], ["a:1!", "b:1!", "a:2!"]],
  ])("%s", (_story, before, grants, after, order) => {
    expect(served(before as string[], grants as number, after as string[])).toEqual(order);
  });

  // `caller/session:id`: sessions of one caller take turns as callers do; a caller's turns are still one per round.
  it.each([
    ["one key's two sessions alternate", ["k/s:1", "k/s:2", "k/s:3", "k/t:1"], ["k/s:1", "k/t:1", "k/s:2", "k/s:3"]],
    ["a session's burst does not hold another session of its key back", ["k/s:1", "k/s:2", "k/s:3", "k/s:4", "k/t:1", "k/u:1"], ["k/s:1", "k/t:1", "k/u:1", "k/s:2", "k/s:3", "k/s:4"]],
    ["sessions share their key's turn: a key of many sessions gets no more turns than a key of one", ["k/s:1", "k/t:1", "k/u:1", "j/v:1", "j/v:2"], ["k/s:1", "j/v:1", "k/t:1", "j/v:2", "k/u:1"]],
  ])("%s", (_story, before, order) => {
    const sessionTurn = (item: string): Turn => ({ caller: item.split("/")[0]!, lane: "interactive", session: item.split("/")[1]!.split(":")[0]! });
    const queue = new FairQueue<string>();
    for (const item of before) queue.push(item, sessionTurn(item));
    const out: string[] = [];
    for (let item = queue.shift(1); item !== undefined; item = queue.shift(1)) {
      out.push(item);
      queue.release(sessionTurn(item).caller);
    }
    expect(out).toEqual(order);
  });

  it("a request taken out (its client left) is never served; taking it twice is told", () => {
    const queue = new FairQueue<string>();
    queue.push("a:1", turn("a:1"));
    const remove = queue.push("a:2", turn("a:2"));
    queue.push("b:1", turn("b:1"));
    expect(remove()).toBe(true);
    expect(remove()).toBe(false);
    expect([queue.length, queue.shift(), queue.shift(), queue.shift()]).toEqual([2, "a:1", "b:1", undefined]);
  });

  it("clear hands back every waiting item", () => {
    const queue = new FairQueue<string>();
    for (const item of ["a:1", "b:1!", "c:1"]) queue.push(item, turn(item));
    expect(queue.clear().sort()).toEqual(["a:1", "b:1!", "c:1"]);
    expect(queue.length).toBe(0);
  });

  it("wouldBeNext: an empty queue for anyone; over waiting batch requests for interactive ones only", () => {
    const queue = new FairQueue<string>();
    expect(queue.wouldBeNext("batch")).toBe(true);
    queue.push("a:1!", turn("a:1!"));
    expect([queue.wouldBeNext("interactive"), queue.wouldBeNext("batch")]).toEqual([true, false]);
    queue.push("b:1", turn("b:1"));
    expect(queue.wouldBeNext("interactive")).toBe(false);
  });

  it("shared: more than one caller within the window", () => {
    let now = 0;
    const queue = new FairQueue<string>({ clock: { now: () => now, after: () => () => {} } });
    queue.note("a");
    queue.note("a");
    expect(queue.shared()).toBe(false);
    now = 5_000;
    queue.note("b");
    expect(queue.shared()).toBe(true);
    now = 5_000 + SHARED_WINDOW_MS + 1; // a's last request is older than the window
    queue.note("b");
    expect(queue.shared()).toBe(false);
  });

  describe("places kept for others", () => {
    const shared = () => {
      const queue = new FairQueue<string>({ clock: { now: () => 0, after: () => () => {} } });
      queue.note("flood");
      queue.note("calm");
      return queue;
    };

    it.each([
      // who asks, lane, places free, places the flood holds, interactive request taken?
      ["calm, its first place, the last one free", "calm", "interactive", 1, 1, true],
      ["the flood, holding one, the last one free", "flood", "interactive", 1, 1, false],
      ["the flood, holding one, two free", "flood", "interactive", 2, 1, true],
      ["batch, the last one free on a busy runner", "flood", "batch", 1, 1, false],
      ["batch, two free", "flood", "batch", 2, 1, true],
      ["batch, the only one free on an idle runner", "flood", "batch", 1, 0, true],
      ["nobody, with no place free", "calm", "interactive", 0, 1, false],
    ])("%s", (_story, caller, lane, free, floodHolds, taken) => {
      const queue = shared();
      for (let i = 0; i < (floodHolds as number); i++) expect(queue.takesNow({ caller: "flood", lane: "interactive" }, 9)).toBe(true);
      expect(queue.takesNow({ caller: caller as string, lane: lane as "interactive" | "batch" }, free as number)).toBe(taken);
    });

    it("shift passes over a caller that may not take the last place, and serves the next", () => {
      const queue = shared();
      expect(queue.takesNow({ caller: "flood", lane: "interactive" }, 2)).toBe(true);
      queue.push("flood:2", turn("flood:2"));
      queue.push("calm:1", turn("calm:1"));
      expect(queue.shift(1)).toBe("calm:1");
      expect(queue.shift(0)).toBeUndefined();
      queue.release("flood");
      queue.release("calm");
      expect(queue.shift(2)).toBe("flood:2");
    });

    it("a key whose batch line holds a place takes the last one for its interactive request (it waited behind its own batch)", () => {
      const queue = new FairQueue<string>({ clock: { now: () => 0, after: () => () => {} } });
      // Two keys' batch lines on the runner: neither makes it shared, neither holds an interactive place.
      queue.note("a", "batch");
      queue.note("b", "batch");
      expect(queue.takesNow({ caller: "a", lane: "batch" }, 3)).toBe(true);
      expect(queue.takesNow({ caller: "b", lane: "batch" }, 2)).toBe(true);
      expect(queue.shared()).toBe(false);
      queue.note("a");
      expect(queue.takesNow({ caller: "a", lane: "interactive" }, 1)).toBe(true);
      // Its interactive place counts: with another key now asking, a's second one keeps the last for it.
      queue.release("b", "batch");
      queue.note("b");
      expect(queue.takesNow({ caller: "a", lane: "interactive" }, 1)).toBe(false);
      expect(queue.takesNow({ caller: "b", lane: "interactive" }, 1)).toBe(true);
    });

    it("alone on a runner, a caller takes every place", () => {
      const queue = new FairQueue<string>({ clock: { now: () => 0, after: () => () => {} } });
      queue.note("flood");
      expect([queue.takesNow(turn("flood:1"), 2), queue.takesNow(turn("flood:2"), 1)]).toEqual([true, true]);
    });
  });
});

/** A clock the test moves: its timers fire in their order as it passes their time. */
function manualClock() {
  let now = 0;
  const timers = new Set<{ at: number; then: () => void }>();
  const clock: Clock = {
    now: () => now,
    after(ms, then) {
      const timer = { at: now + ms, then };
      timers.add(timer);
      return () => timers.delete(timer);
    },
  };
  const advanceTo = (end: number) => {
    for (;;) {
      const next = [...timers].filter((t) => t.at <= end).sort((a, b) => a.at - b.at)[0];
      if (!next) break;
      timers.delete(next);
      now = next.at;
      next.then();
    }
    now = end;
  };
  return { clock, advanceTo, armed: () => [...timers].map((t) => t.at) };
}

/**
 * A runner of `places` slots driven by a timeline, as Runner drives its queue: at each time, `+a:1`
 * comes (granted at once if it may, else queued, then a grant), `-a:1` ends (a grant follows),
 * `xa:1` leaves the queue; then time runs on to `end`. Gives every grant as `item@time`, and the
 * timers armed at the end.
 */
function timeline(steps: [number, string][], places = 2, end = 60_000) {
  const { clock, advanceTo, armed } = manualClock();
  let inUse = 0;
  const granted: string[] = [];
  const take = (item: string) => (inUse++, granted.push(`${item}@${clock.now()}`));
  const grant = () => {
    for (let item = queue.shift(places - inUse); item !== undefined; item = queue.shift(places - inUse)) take(item);
  };
  const queue: FairQueue<string> = new FairQueue<string>({ clock, regrant: grant });
  const leave = new Map<string, () => boolean>();
  for (const [at, step] of steps) {
    advanceTo(at);
    const item = step.slice(1);
    if (step.startsWith("+")) {
      queue.note(turn(item).caller);
      if (queue.takesNow(turn(item), places - inUse)) take(item);
      else leave.set(item, queue.push(item, turn(item))), grant();
    } else if (step.startsWith("-")) {
      inUse--;
      queue.release(turn(item).caller, turn(item).lane);
      grant();
    } else leave.get(item)!();
  }
  advanceTo(end);
  return { granted, armed: armed() };
}

describe("the fair queue when sharing ends", () => {
  // Two keys on a runner of two slots: a holds one for a long generation, b's request has ended,
  // a's second request is held back for b (the last free slot is kept for others while shared).
  const heldBack: [number, string][] = [
    [0, "+a:1"],
    [0, "+b:1"],
    [1_000, "-b:1"],
    [2_000, "+a:2"],
  ];
  const W = SHARED_WINDOW_MS;

  const first = ["a:1@0", "b:1@0"];
  it.each<[string, [number, string][], string[]]>([
    ["held back for a key gone quiet: granted as its window ends, with a's first still running", heldBack, [...first, `a:2@${W + 1}`]],
    [
      "both keys ask again meanwhile: b is served, a waits for b's new window",
      [...heldBack, [9_000, "+b:2"], [9_500, "-b:2"], [9_600, "+a:3"]],
      [...first, "b:2@9000", `a:2@${9_000 + W + 1}`],
    ],
    ["three keys: granted once both others are quiet", [[0, "+a:1"], [0, "+b:1"], [500, "-b:1"], [600, "+c:1"], [700, "-c:1"], [1_000, "+a:2"]], [...first, "c:1@600", `a:2@${600 + W + 1}`]],
    ["a's first ends before: granted then", [...heldBack, [3_000, "-a:1"]], [...first, "a:2@3000"]],
    ["the held-back request leaves", [...heldBack, [3_000, "xa:2"]], first],
    ["only batch work held back: sharing does not hold it, no grant comes of its end", [[0, "+a:1"], [0, "+b:1"], [1_000, "-b:1"], [2_000, "+a:2!"]], first],
    ["one key alone: nothing held back for others", [[0, "+a:1"], [0, "+a:2"], [0, "+a:3"]], ["a:1@0", "a:2@0"]],
  ])("%s", (_story, steps, granted) => {
    const run = timeline(steps);
    expect(run.granted).toEqual(granted);
    // Nothing is left armed: a timer never outlives what it was for.
    expect(run.armed).toEqual([]);
  });

  const askAgain: [number, string][] = [...heldBack, [5_000, "+b:2"], [5_100, "-b:2"], [6_000, "+a:3"]];
  it.each<[string, [number, string][], number, number[]]>([
    ["armed for the moment sharing ends", heldBack, 2_000, [W + 1]],
    ["both keys ask again: the timer due sooner stays", askAgain, 6_000, [W + 1]],
    ["...and when it fires, the runner still shared, it is armed for the new end", askAgain, W + 1, [5_000 + W + 1]],
    ["cleared once the request is granted otherwise", [...heldBack, [3_000, "-a:1"]], 3_000, []],
    ["cleared once it leaves", [...heldBack, [3_000, "xa:2"]], 3_000, []],
    ["none for batch work", [[0, "+a:1"], [0, "+b:1"], [1_000, "-b:1"], [2_000, "+a:2!"]], 2_000, []],
    ["none when the runner is not shared", [[0, "+a:1"], [0, "+a:2"], [0, "+a:3"]], 0, []],
  ])("the timer: %s", (_story, steps, at, armed) => {
    expect(timeline(steps, 2, at).armed).toEqual(armed);
  });

  it("the timer is armed for the moment sharing ends, and once only", () => {
    const { clock, armed, advanceTo } = manualClock();
    const queue = new FairQueue<string>({ clock });
    queue.note("a");
    expect(queue.sharedUntil()).toBeUndefined();
    advanceTo(4_000);
    queue.note("b");
    expect(queue.sharedUntil()).toBe(W + 1);
    expect(queue.takesNow(turn("a:1"), 2)).toBe(true);
    queue.push("a:2", turn("a:2"));
    expect([queue.shift(1), queue.shift(1)]).toEqual([undefined, undefined]);
    expect(armed()).toEqual([W + 1]);
  });
});

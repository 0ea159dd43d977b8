import { describe, expect, it } from "vitest";
import { FairQueue, SHARED_WINDOW_MS, type Turn } from "../../src/scheduler/fair-queue.ts";

// The fair queue as a table: requests pushed as `caller:id` (`caller:id!` in the batch lane),
// then every grant's order. Each row is one story of a runner's queue.

const turn = (item: string): Turn => ({ caller: item.split(":")[0]!, lane: item.endsWith("!") ? "batch" : "interactive" });

/** Pushes `before`, grants `grants` items, pushes `after`, then grants to the end (one place: each grant ends before the next). */
function served(before: string[], grants = 0, after: string[] = []): string[] {
  const queue = new FairQueue<string>();
  const out: string[] = [];
  const grant = () => {
    const item = queue.shift(1);
    if (item !== undefined) queue.release(turn(item).caller);
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
    const queue = new FairQueue<string>(() => now);
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
      const queue = new FairQueue<string>(() => 0);
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

    it("alone on a runner, a caller takes every place", () => {
      const queue = new FairQueue<string>(() => 0);
      queue.note("flood");
      expect([queue.takesNow(turn("flood:1"), 2), queue.takesNow(turn("flood:2"), 1)]).toEqual([true, true]);
    });
  });
});

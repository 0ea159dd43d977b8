import { describe, expect, it } from "vitest";
import { queuedClock, systemClock, type TimerHost } from "../../src/http/clock.ts";

// The queued clock keeps one runtime timer for all the waits in flight (the album's calls, the
// inference requests' time limits: waits of one length fall due in the order they were set): on a
// host whose time the test moves, every wait fires at its own time, in order, never once ended,
// and no timer outlives the waits.

/** Timers on a time the test moves; `armed` is how many are set now. */
function movedTime() {
  let now = 0;
  let timers: { at: number; fire: () => void }[] = [];
  const host: TimerHost = {
    now: () => now,
    set(fire, ms) {
      const timer = { at: now + ms, fire };
      timers.push(timer);
      return timer;
    },
    clear: (timer) => void (timers = timers.filter((t) => t !== timer)),
  };
  const advance = (ms: number) => {
    now += ms;
    for (let due = timers.find((t) => t.at <= now); due; due = timers.find((t) => t.at <= now)) {
      timers = timers.filter((t) => t !== due);
      due.fire();
    }
  };
  return { host, advance, armed: () => timers.length };
}

describe("the queued clock", () => {
  it("fires each wait at its own time, oldest first, on one timer", () => {
    const time = movedTime();
    const clock = queuedClock(time.host);
    const fired: string[] = [];
    clock.after(100, () => fired.push("a"));
    time.advance(30);
    clock.after(100, () => fired.push("b"));
    time.advance(30);
    clock.after(100, () => fired.push("c"));
    expect(time.armed()).toBe(1);
    time.advance(39);
    expect(fired).toEqual([]);
    time.advance(1);
    expect(fired).toEqual(["a"]);
    time.advance(29);
    expect(fired).toEqual(["a"]);
    time.advance(1);
    expect(fired).toEqual(["a", "b"]);
    time.advance(30);
    expect(fired).toEqual(["a", "b", "c"]);
    expect(time.armed()).toBe(0);
  });

  it("never fires an ended wait, and finds the next one when the timer's own has ended", () => {
    const time = movedTime();
    const clock = queuedClock(time.host);
    const fired: string[] = [];
    const endA = clock.after(100, () => fired.push("a"));
    time.advance(50);
    const endB = clock.after(100, () => fired.push("b"));
    clock.after(100, () => fired.push("c"));
    endA();
    time.advance(50); // the timer set for a: nothing due, armed again for b
    expect(fired).toEqual([]);
    expect(time.armed()).toBe(1);
    endB();
    time.advance(50);
    expect(fired).toEqual(["c"]);
    endB(); // ending twice, or after it fired, does nothing
  });

  it("clears its timer when the last wait ends, so nothing keeps the process up", () => {
    const time = movedTime();
    const clock = queuedClock(time.host);
    const ends = [clock.after(100, () => {}), clock.after(100, () => {})];
    ends.forEach((end) => end());
    expect(time.armed()).toBe(0);
    clock.after(100, () => {});
    expect(time.armed()).toBe(1);
  });

  it("keeps waits of different lengths apart, each in its own order", () => {
    const time = movedTime();
    const clock = queuedClock(time.host);
    const fired: string[] = [];
    clock.after(100, () => fired.push("long"));
    clock.after(10, () => fired.push("short"));
    time.advance(10);
    expect(fired).toEqual(["short"]);
    time.advance(90);
    expect(fired).toEqual(["short", "long"]);
  });

  it("on the runtime's timers, fires a wait and not one that ended", async () => {
    const fired: string[] = [];
    const end = systemClock.after(5, () => fired.push("ended"));
    const kept = new Promise<void>((resolve) => systemClock.after(5, () => (fired.push("kept"), resolve())));
    end();
    await kept;
    expect(fired).toEqual(["kept"]);
  });
});

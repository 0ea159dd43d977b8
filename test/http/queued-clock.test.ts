import { describe, expect, it } from "vitest";
import { queuedClock, systemClock, type TimerHost } from "../../src/http/clock.ts";

// The queued clock keeps one runtime timer for all the waits in flight (the album's calls, the
// inference requests' time limits: waits of one length fall due in the order they were set): on a
// host whose time the test moves, every wait fires at its own time, in order, never once ended,
// and no timer outlives the waits.

/** Timers on a time the test moves; `armed` is how many are set now, `held` how many of them keep the process up. */
function movedTime() {
  let now = 0;
  let timers: { at: number; fire: () => void; held: boolean }[] = [];
  const host: TimerHost = {
    now: () => now,
    set(fire, ms) {
      const timer = { at: now + ms, fire, held: true };
      timers.push(timer);
      return timer;
    },
    hold: (timer, held) => void ((timer as { held: boolean }).held = held),
  };
  const advance = (ms: number) => {
    now += ms;
    for (let due = timers.find((t) => t.at <= now); due; due = timers.find((t) => t.at <= now)) {
      timers = timers.filter((t) => t !== due);
      due.fire();
    }
  };
  return { host, advance, armed: () => timers.length, held: () => timers.filter((t) => t.held).length };
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

  it("lets go of its timer when the last wait ends, so nothing keeps the process up, and holds it again for the next", () => {
    const time = movedTime();
    const clock = queuedClock(time.host);
    const fired: string[] = [];
    const ends = [clock.after(100, () => {}), clock.after(100, () => {})];
    ends.forEach((end) => end());
    expect([time.armed(), time.held()]).toEqual([1, 0]);
    time.advance(50);
    clock.after(100, () => fired.push("next")); // the same timer, held again: none set per wait
    expect([time.armed(), time.held()]).toEqual([1, 1]);
    time.advance(50); // the let-go timer fires for nothing due, and is armed for the next
    expect([fired, time.armed(), time.held()]).toEqual([[], 1, 1]);
    time.advance(50);
    expect([fired, time.armed()]).toEqual([["next"], 0]);
    const end = clock.after(100, () => fired.push("never"));
    end();
    time.advance(100); // a let-go timer that fires with nothing queued is not armed again
    expect([fired, time.armed()]).toEqual([["next"], 0]);
  });

  it("fires a watch from its last start, in order with the other waits, and never once stopped", () => {
    const time = movedTime();
    const clock = queuedClock(time.host);
    const fired: string[] = [];
    const watch = clock.watch(100, () => fired.push("watch"));
    watch.start();
    time.advance(30);
    clock.after(100, () => fired.push("wait"));
    time.advance(30);
    watch.start(); // started again: due at 160, behind the wait due at 130
    time.advance(70);
    expect(fired).toEqual(["wait"]);
    time.advance(30);
    expect(fired).toEqual(["wait", "watch"]);
    watch.start();
    watch.stop();
    time.advance(200);
    expect([fired, time.armed()]).toEqual([["wait", "watch"], 0]);
    watch.start(); // a watch that fired, or was stopped, starts again
    time.advance(100);
    expect(fired).toEqual(["wait", "watch", "watch"]);
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

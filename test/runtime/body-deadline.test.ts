import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { idleClock } from "../../src/runtime/body-deadline.ts";

// The idle clock of a request body on its own, on vitest's fake timers (a pure state machine:
// through real servers on each runtime, test/e2e/body-deadline.test.ts and slow-reader.test.ts).

beforeEach(() => void vi.useFakeTimers());
afterEach(() => void vi.useRealTimers());

function clock() {
  let fired = 0;
  return { clock: idleClock(1_000, () => fired++), fired: () => fired };
}

describe("idleClock", () => {
  it("fires once, when a wait has had no byte for the idle time", () => {
    const { clock: c, fired } = clock();
    c.wait();
    vi.advanceTimersByTime(999);
    expect(fired()).toBe(0);
    vi.advanceTimersByTime(1);
    expect(fired()).toBe(1);
    vi.advanceTimersByTime(10_000);
    expect(fired()).toBe(1);
  });

  it("counts from the last byte: a body that keeps arriving never fires, however long it lasts", () => {
    const { clock: c, fired } = clock();
    for (let i = 0; i < 100; i++) {
      c.wait();
      vi.advanceTimersByTime(900);
    }
    expect(fired()).toBe(0);
    vi.advanceTimersByTime(100);
    expect(fired()).toBe(1);
  });

  it("does not count while held (we are not reading), and counts again from the next wait", () => {
    const { clock: c, fired } = clock();
    c.wait();
    vi.advanceTimersByTime(500);
    c.hold();
    vi.advanceTimersByTime(60_000);
    expect(fired()).toBe(0);
    c.wait();
    vi.advanceTimersByTime(999);
    expect(fired()).toBe(0);
    vi.advanceTimersByTime(1);
    expect(fired()).toBe(1);
  });

  it("never fires once stopped, and leaves no timer", () => {
    const { clock: c, fired } = clock();
    c.wait();
    c.stop();
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(60_000);
    expect(fired()).toBe(0);
  });

  it("keeps one timer for a body, not one per chunk", () => {
    const { clock: c } = clock();
    for (let i = 0; i < 10_000; i++) c.wait();
    expect(vi.getTimerCount()).toBe(1);
  });
});

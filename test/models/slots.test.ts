import { describe, expect, it } from "vitest";
import { createSlots } from "../../src/models/pull/slots.ts";

// The limit on pulls running at once, on its own: first come, first served, and a waiter that
// leaves never gets (nor keeps) a slot.

const never = new AbortController().signal;
const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

describe("createSlots", () => {
  it("gives slots in arrival order once the limit is reached", async () => {
    const slots = createSlots(1);
    const order: string[] = [];
    const first = await slots.acquire(never);
    const waiters = ["b", "c", "d"].map((name) => slots.acquire(never).then((release) => (order.push(name), release)));
    await tick();
    expect(order).toEqual([]);
    first();
    first(); // a second release of the same slot gives nothing more away
    await tick();
    expect(order).toEqual(["b"]);
    (await waiters[0]!)();
    (await waiters[1]!)();
    await tick();
    expect(order).toEqual(["b", "c", "d"]);
  });

  it("drops a waiter whose signal aborts; the slot goes to the next one", async () => {
    const slots = createSlots(1);
    const first = await slots.acquire(never);
    const leaving = new AbortController();
    const left = slots.acquire(leaving.signal);
    const next = slots.acquire(never);
    leaving.abort(new Error("gone"));
    await expect(left).rejects.toThrow("gone");
    first();
    const release = await next;
    // The slot is held again: a newcomer waits.
    let got = false;
    void slots.acquire(never).then(() => (got = true));
    await tick();
    expect(got).toBe(false);
    release();
    await tick();
    expect(got).toBe(true);
  });
});

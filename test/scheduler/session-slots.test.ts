import { describe, expect, it } from "vitest";
import type { Turn } from "../../src/scheduler/fair-queue.ts";
import { SessionSlots } from "../../src/scheduler/session-slots.ts";
import type { RunnerProcess } from "../../src/scheduler/types.ts";

// What a runner's slot table shows (the status page's sessions view): whose conversation each
// slot holds, under which key, and the sessions it parked.

const never = new AbortController().signal;
const process: RunnerProcess = {
  fetch: (async () => new Response("ok")) as unknown as typeof fetch,
  exited: new Promise<Error>(() => {}),
  running: () => true,
  stop: async () => {},
  kill: async () => {},
};

describe("a runner's slot table as shown", () => {
  const start = (caller: string, extra: Partial<Turn>): Turn => ({ caller, lane: "interactive", prefix: "P", ...extra });

  it("each slot's holder by key (a session by its name, an anonymous conversation by its opening); sessions displaced are parked under their key", () => {
    const slots = new SessionSlots(2, 0);
    const lease = (turn: Turn) => slots.lease(turn, process, never, undefined, () => {});
    expect(slots.view()).toEqual({ slots: [{ busy: false }, { busy: false }], parked: [] });
    const a = lease(start("alice", { session: "session-a" }));
    const anonymous = lease(start("bob", { opening: "0123abcd" }));
    expect(slots.view()).toEqual({
      slots: [
        { busy: true, holder: { key: "alice", session: "session-a" } },
        { busy: true, holder: { key: "bob", opening: "0123abcd" } },
      ],
      parked: [],
    });
    a.release();
    anonymous.release();
    // A session of bob's takes the slot of bob's anonymous conversation (no session's is parked while one is free) ...
    lease(start("bob", { session: "session-b" })).release();
    // ... and the next new one takes alice's, parked.
    lease(start("carol", { session: "session-c" }));
    expect(slots.view()).toEqual({
      slots: [
        { busy: true, holder: { key: "carol", session: "session-c" } },
        { busy: false, holder: { key: "bob", session: "session-b" } },
      ],
      parked: [{ key: "alice", session: "session-a" }],
    });
  });
});

import type { SlotCopy, SlotParking } from "./types.ts";
import type { Placement } from "./affinity.ts";
import type { LeaseSlot } from "./lease.ts";
import { ParkedSlots } from "./parking.ts";

// The copies of a slot that followers restore (see affinity.ts's `follow`): sessions opened
// together over one long start wait while the first of them processes it, then each gets a copy
// of that slot in its own before it is sent, and processes only what follows the start. A session
// that comes later, to a slot without its start, gets a copy of a free slot that holds it.
//
// llama-server copies a slot only through a file (its slot save and restore), and saves a slot only
// once its request has ended (a save asked for earlier waits in its queue for the slot). So a
// leader's prompt is processed first by a request of its own that generates nothing (sent by the
// forwarder, see `prefilled`): its slot is saved as that ends, and the followers restore the copy
// while the leader's own request, sent after the save, reuses the whole prompt and answers. Followers
// wait for the leader's prefill, not its answer. A copy, not a prefill of their own: on a CPU the
// start costs seconds to process and milliseconds to restore.
//
// The slot being copied is held until it is saved: a request placed on it (or left to
// llama-server, which may pick it) is sent only then. Sent at once (the next session given the
// leader's slot as the leader ends), it could run there before the save: HTTP keeps no order
// between connections, and a save that finds the slot still busy is deferred by llama-server
// behind what runs there next. The save then copied that request's conversation, not the start,
// and the followers processed the start again. The save starts as the slot is freed (the leader's
// end, or the grant of a follower of a free slot), before anyone else can be placed there; a hold
// lasts the time of one save (the start written at disk speed).
//
// Saves of one slot go one at a time (a copy, then a parking of the same slot): llama-server defers
// a save of a slot still busy (a leader whose client left is cancelled only when llama-server sees
// the connection closed) and takes back one deferred task per slot it frees, so a second save
// deferred beside the first would wait for another slot to end.

/** Saves a slot and hands its copy (undefined: the runner cannot copy slots). */
export type CopySlot = (from: number) => Promise<SlotCopy | undefined>;

type Group = {
  /** Settles when the leader's request ended (its slot may then be saved). */
  led: Promise<void>;
  end: () => void;
  /** The copy, made once for all followers as the leader ends (see `ended`). */
  copy?: Promise<SlotCopy | undefined>;
  /** Followers that have not restored yet: the copy's file goes once none is left. */
  pending: number;
};

export class PrefixCopies {
  /** Leader's slot -> its group while the leader runs (followers join only then). */
  private readonly open = new Map<number, Group>();
  /** Slot -> settles once no copy of it is left to save (see `hold`). */
  private readonly holds = new Map<number, Promise<void>>();

  private readonly copySlot: CopySlot | undefined;
  private readonly parked: ParkedSlots;

  constructor(copySlot: CopySlot | undefined, parking?: SlotParking) {
    this.copySlot = copySlot;
    this.parked = new ParkedSlots(parking);
  }

  /**
   * The slot of a placed request and what is done before it is sent: a copy of that slot being
   * saved first (see `hold`), the conversation it displaces parked (started now, or after that
   * copy: the slot is free), then its own parked conversation restored, else the copy of its start
   * it follows. Leaders are marked by the caller (`lead`).
   */
  prepare(where: Placement): LeaseSlot {
    // Left to llama-server, a request may land on any idle slot: it waits for every copy being saved.
    const held = where.kind === "any" ? this.heldAll() : this.holds.get(where.slot);
    const waitHeld = held && ((signal: AbortSignal) => abortable(held, signal));
    if (where.kind === "any") return waitHeld ? { ready: waitHeld } : {};
    if (where.kind === "own") return { slot: where.slot, ...(waitHeld ? { ready: waitHeld } : {}) };
    const parked = where.park === undefined ? undefined : this.parked.park(where.slot, where.park, held);
    // Held while it is parked, as while it is copied: a request left to llama-server could run
    // there before the save, and its conversation would be stored as the parked session's.
    if (parked) this.hold(where.slot, parked);
    const { unpark } = where;
    const follow = where.kind === "follow" ? this.follow(where.from, where.slot, unpark !== undefined) : undefined;
    if (!held && !parked && unpark === undefined) return { slot: where.slot, ...(follow ? { ready: follow } : {}) };
    const ready = async (signal: AbortSignal): Promise<boolean> => {
      let unparked = false;
      try {
        if (held) await abortable(held, signal);
        if (parked) await abortable(parked, signal);
        if (unpark !== undefined) unparked = await abortable(this.parked.unpark(unpark, where.slot), signal);
      } catch (error) {
        void follow?.(signal, true);
        throw error;
      }
      return follow ? follow(signal, unparked) : unparked;
    };
    return { slot: where.slot, ready };
  }

  /** A leader starts on `slot` (a follower may join it until it ends). */
  lead(slot: number): void {
    let end!: () => void;
    const led = new Promise<void>((resolve) => (end = resolve));
    this.open.set(slot, { led, end, pending: 0 });
  }

  /**
   * The leader on `slot` has its prompt processed (a request of its own that generated nothing):
   * its slot is saved now for the followers waiting (none waiting, no save: one that joins later
   * copies the slot once the leader ends, as before), who then restore it. Resolves once the slot
   * is saved, when the leader's own request may be sent (or at once when the signal aborts).
   */
  prefilled(slot: number, signal: AbortSignal): Promise<void> {
    const group = this.open.get(slot);
    if (!group) return Promise.resolve();
    if (group.pending > 0) group.copy ??= this.copyOf(slot);
    group.end();
    const held = this.holds.get(slot);
    return held ? abortable(held, signal) : Promise.resolve();
  }

  /**
   * The leader on `slot` ended: its slot is saved now for its followers (those that joined after its
   * prefill, or all of them when it had none), before the slot can be given to anyone else (the
   * caller frees it in the table after this).
   */
  ended(slot: number): void {
    const group = this.open.get(slot);
    if (!group) return;
    this.open.delete(slot);
    if (group.pending > 0) group.copy ??= this.copyOf(slot);
    group.end();
  }

  /**
   * A follower of slot `from` (its leader's, or a free slot holding the same start), to go into
   * `into`: what it does before it is sent (waits for the leader, if one runs there, and restores
   * the copy). Resolves whether the copy was restored; a follower whose client left gives its
   * place in the group up, as does one that needs no copy (`unparked`: its conversation is there).
   * A free slot is copied at once (now, as the follower is placed), for this follower alone; one
   * that `unparks` first copies only if its unpark fails, and holds the slot until it knows.
   */
  follow(from: number, into: number, unparks = false): (signal: AbortSignal, unparked?: boolean) => Promise<boolean> {
    if (!this.copySlot) return async (_signal, unparked = false) => unparked;
    let group = this.open.get(from);
    let decided = () => {};
    if (!group) {
      group = { led: Promise.resolve(), end: () => {}, pending: 0 };
      if (!unparks) group.copy = this.copyOf(from);
      else this.hold(from, new Promise<void>((resolve) => (decided = resolve)));
    }
    const joined = group;
    joined.pending++;
    let done = false;
    const leave = (copy: SlotCopy | undefined) => {
      if (done) return;
      done = true;
      if (--joined.pending === 0) void copy?.drop();
    };
    const giveUp = () => (decided(), joined.copy ? void joined.copy.then(leave) : leave(undefined));
    return async (signal, unparked = false) => {
      if (unparked) return (giveUp(), true);
      try {
        await abortable(joined.led, signal);
        // Its own hold now covers the slot until it is saved.
        joined.copy ??= this.copyOf(from);
        decided();
        const copy = await abortable(joined.copy, signal);
        const restored = copy ? await copy.restore(into).catch(() => false) : false;
        leave(copy);
        return restored;
      } catch (error) {
        // Left early: the copy (if one is made) goes with the last follower.
        giveUp();
        throw error;
      }
    };
  }

  /** Saves slot `from` for followers (after what holds it already), and holds it until it is saved. */
  private copyOf(from: number): Promise<SlotCopy | undefined> {
    const before = this.holds.get(from);
    const copy = (before ? before.then(() => this.copySlot!(from)) : this.copySlot!(from)).catch(() => undefined);
    this.hold(from, copy);
    return copy;
  }

  /** Requests placed on `slot` are sent once `until` settles (with the slot's other holds). */
  private hold(slot: number, until: Promise<unknown>): void {
    const held = Promise.all([this.holds.get(slot), until]).then(
      () => {},
      () => {},
    );
    this.holds.set(slot, held);
    void held.then(() => this.holds.get(slot) === held && this.holds.delete(slot));
  }

  /** Every hold, for a request llama-server places itself (undefined: none). */
  private heldAll(): Promise<void> | undefined {
    if (this.holds.size === 0) return undefined;
    return Promise.all(this.holds.values()).then(() => {});
  }
}

/** `promise`, or the signal's reason once it aborts. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => (signal.removeEventListener("abort", onAbort), resolve(value)),
      (error: unknown) => (signal.removeEventListener("abort", onAbort), reject(error as Error)),
    );
  });
}

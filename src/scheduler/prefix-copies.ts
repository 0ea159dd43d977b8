import type { SlotCopy } from "./types.ts";

// The copies of a slot that followers restore (see affinity.ts's `follow`): sessions opened
// together over one long start wait while the first of them processes it, then each gets a copy
// of that slot in its own before it is sent, and processes only what follows the start. A session
// that comes later, to a slot without its start, gets a copy of a free slot that holds it.
//
// llama-server copies a slot only through a file (its slot save and restore), and saves a slot only
// once its request has ended (a save asked for earlier waits in its queue for the slot): followers
// wait for the leader's whole answer, not only its prompt. A copy, not a prefill: on a CPU the
// start costs seconds to process and milliseconds to restore.

/** Saves a slot and hands its copy (undefined: the runner cannot copy slots). */
export type CopySlot = (from: number) => Promise<SlotCopy | undefined>;

type Group = {
  /** Settles when the leader's request ended (its slot may then be saved). */
  led: Promise<void>;
  end: () => void;
  /** The copy, made once for all followers when the first of them asks after the leader ended. */
  copy?: Promise<SlotCopy | undefined>;
  /** Followers that have not restored yet: the copy's file goes once none is left. */
  pending: number;
};

export class PrefixCopies {
  /** Leader's slot -> its group while the leader runs (followers join only then). */
  private readonly open = new Map<number, Group>();

  private readonly copySlot: CopySlot | undefined;

  constructor(copySlot: CopySlot | undefined) {
    this.copySlot = copySlot;
  }

  /** A leader starts on `slot` (a follower may join it until it ends). */
  lead(slot: number): void {
    let end!: () => void;
    const led = new Promise<void>((resolve) => (end = resolve));
    this.open.set(slot, { led, end, pending: 0 });
  }

  /** The leader on `slot` ended: its followers may copy its slot now. */
  ended(slot: number): void {
    const group = this.open.get(slot);
    if (!group) return;
    this.open.delete(slot);
    group.end();
  }

  /**
   * A follower of slot `from` (its leader's, or a free slot holding the same start), to go into
   * `into`: what it does before it is sent (waits for the leader, if one runs there, and restores
   * the copy). Resolves whether the copy was restored; a follower whose client left gives its
   * place in the group up.
   */
  follow(from: number, into: number): (signal: AbortSignal) => Promise<boolean> {
    const copySlot = this.copySlot;
    if (!copySlot) return async () => false;
    // A free slot is copied at once, for this follower alone.
    const group = this.open.get(from) ?? { led: Promise.resolve(), end: () => {}, pending: 0 };
    group.pending++;
    let done = false;
    const leave = (copy: SlotCopy | undefined) => {
      if (done) return;
      done = true;
      if (--group.pending === 0) void copy?.drop();
    };
    return async (signal) => {
      try {
        await abortable(group.led, signal);
        const copy = await abortable((group.copy ??= copySlot(from).catch(() => undefined)), signal);
        const restored = copy ? await copy.restore(into).catch(() => false) : false;
        leave(copy);
        return restored;
      } catch (error) {
        // Left early: the copy (if one is made) goes with the last follower.
        if (group.copy) void group.copy.then(leave);
        else leave(undefined);
        throw error;
      }
    };
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

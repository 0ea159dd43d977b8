import type { SlotParking } from "./types.ts";
import { MAX_PARKED_SESSIONS } from "./affinity.ts";

// The effects of parking (see affinity.ts): a displaced session's conversation is saved before
// the request given its slot is sent, and restored into the slot its session is given when it
// comes back. A session may come back while its conversation is still being saved: its restore
// waits for that save. One parked elsewhere (before the runner loaded, or by another replica on
// the same store) is the folder's to find (`keeps`). What fails (a save refused, a file past the folder's budget) costs only
// the processing of that conversation again: the runner's parking logs it, no request fails.

export class ParkedSlots {
  /** Session -> whether its conversation was saved (pending while it is saved), longest parked first. */
  private readonly saves = new Map<string, Promise<boolean>>();

  private readonly parking: SlotParking | undefined;

  constructor(parking: SlotParking | undefined) {
    this.parking = parking;
  }

  /**
   * Saves `slot`, which holds `session`'s conversation, at once (the slot is free), or once `after`
   * settles (another save of the slot: see prefix-copies.ts); settles once it is done or failed.
   */
  park(slot: number, session: string, after?: Promise<unknown>): Promise<void> {
    const parking = this.parking;
    if (!parking) return Promise.resolve();
    const saved = (after ? after.then(() => parking.park(slot, session)) : parking.park(slot, session)).catch(() => false);
    this.saves.delete(session);
    this.saves.set(session, saved);
    if (this.saves.size > MAX_PARKED_SESSIONS) this.saves.delete(this.saves.keys().next().value!);
    return saved.then(() => undefined);
  }

  /**
   * Restores `session`'s parked conversation into `slot` once its save is done (parked by this
   * runner), or at once (parked elsewhere): whether it was.
   */
  async unpark(session: string, slot: number): Promise<boolean> {
    const saved = this.saves.get(session) ?? (this.parking?.keeps(session) ? Promise.resolve(true) : undefined);
    this.saves.delete(session);
    if (!this.parking || !saved || !(await saved)) return false;
    return this.parking.unpark(session, slot).catch(() => false);
  }
}

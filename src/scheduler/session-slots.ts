import { SlotTable, type Placement, type SlotState } from "./affinity.ts";
import type { SlotHolder, SlotsView } from "./api.ts";
import { SHARED_WINDOW_MS, type Turn } from "./fair-queue.ts";
import { createLease, type Lease, type LeaseSlot } from "./lease.ts";
import { PrefixCopies } from "./prefix-copies.ts";
import type { RunnerProcess } from "./types.ts";
import type { Watchdog } from "./watchdog.ts";

// One runner's slots and the leases on them: how many are held, which slot a granted request goes
// to (the slot table, affinity.ts), the copy of a start a follower restores first
// or a displaced conversation it gets back (prefix-copies.ts, parking.ts), and how many requests go to llama-server at once while agent sessions use
// it. Apart from runner.ts, whose state machine decides when a request is granted; this decides
// where it goes once it is, frees its slot when it ends, and says whose conversations the slots
// hold when the runner stops (parked then: see the slot cache's runner.ts).

export class SessionSlots {
  #inUse = 0;
  /** Which slot each agent session's requests go to (see affinity.ts). */
  private readonly table: SlotTable;
  /** Made with the process, which copies slots (or cannot). */
  private copies: PrefixCopies | undefined;
  /** When a request of an agent session last came (see inFlightCap). */
  private sessionAt: number | undefined;
  private readonly slots: number;
  private readonly ahead: number;

  constructor(slots: number, ahead: number | undefined) {
    this.slots = slots;
    this.ahead = ahead ?? 0;
    this.table = new SlotTable(slots);
  }

  /** The process is up: its slots can be copied from now on. */
  loaded(process: RunnerProcess): void {
    this.copies = new PrefixCopies(process.copySlot && ((from) => process.copySlot!(from)), process.parking);
    if (process.parking) this.table.recall((session) => process.parking!.keeps(session));
  }

  /** A request asks for a slot (placed ones, of a session or with a start, keep llama-server's queue empty a while). */
  asked(turn: Turn): void {
    if (turn.session !== undefined || turn.prefix !== undefined) this.sessionAt = Date.now();
  }

  /**
   * Requests at llama-server at once: its slots, and those in its own queue (FIFO: see fair-queue.ts).
   * None is queued there while agent sessions use the runner (nor for batch work, nor while it is
   * shared by callers: `waiters.shared()`): a request in its queue takes the first slot that is
   * idle there, and a slot the table gave a follower (see affinity.ts) is idle until the
   * follower's copy is restored: taken meanwhile, the start is processed once more.
   */
  inFlightCap(lane: Turn["lane"], waiters: { shared(): boolean }): number {
    const queued = lane === "batch" || waiters.shared() || this.sessionsRecently() ? 0 : this.ahead;
    return this.slots + queued;
  }

  /** Slot -> the session whose conversation it holds (by the table): parked, not lost, when the runner stops. */
  held(): Map<number, string> {
    return new Map(this.table.view().flatMap((s, slot) => (s.session === undefined ? [] : [[slot, s.session] as const])));
  }

  /** The slots and parked sessions with the key each is named under (see `place`), for the status page. */
  view(): SlotsView {
    return {
      slots: this.table.view().map((s) => ({ busy: s.busy, ...holderOf(s) })),
      parked: this.table.parkedSessions().map((named) => {
        const { key, name } = keyAndName(named);
        return { key, session: name };
      }),
    };
  }

  /** Requests holding a slot now. */
  get inUse(): number {
    return this.#inUse;
  }

  /** A lease on a slot of `process` for a granted request; `released` runs once its slot is free again. */
  lease(turn: Turn, process: RunnerProcess, died: AbortSignal, watchdog: Watchdog | undefined, released: () => void): Lease {
    const where = this.place(turn);
    this.#inUse++;
    return createLease(process, died, watchdog, () => {
      this.#inUse--;
      // A leader's followers copy its slot now, held from whoever `released` grants it to next.
      if (where.kind === "take" && where.lead) this.copies?.ended(where.slot);
      this.table.release(where, Date.now());
      released();
    }, this.leaseSlot(where));
  }

  /** Whether a request of an agent session came within SHARED_WINDOW_MS, or one is placed on a slot now (a prompt may take longer). */
  private sessionsRecently(): boolean {
    return this.table.anyBusy() || (this.sessionAt !== undefined && Date.now() - this.sessionAt < SHARED_WINDOW_MS);
  }

  /**
   * The slot a granted request goes to: a session's request, or one with a start, within the slots
   * (one handed to llama-server's own queue beyond them finds no slot free, and is left to it), by
   * the table. Sessions and openings are named per caller: one key never lands on another's slot by
   * naming its session.
   */
  private place({ caller, session, prefix, opening }: Turn): Placement {
    if ((session === undefined && prefix === undefined) || this.#inUse >= this.slots) return { kind: "any" };
    const group = prefix === undefined ? undefined : `${caller}\u0000${prefix}`;
    const named = (name: string | undefined) => (name === undefined ? undefined : `${caller}\u0000${name}`);
    return this.table.place({ session: named(session), prefix, opening: named(opening), group }, Date.now());
  }

  private leaseSlot(where: Placement): LeaseSlot {
    const prepared = this.copies?.prepare(where) ?? (where.kind === "any" ? {} : { slot: where.slot });
    if (!(where.kind === "take" && where.lead) || !this.copies) return prepared;
    const copies = this.copies;
    copies.lead(where.slot);
    return { ...prepared, prefilled: (signal) => copies.prefilled(where.slot, signal) };
  }
}

/** A name the table keeps (`caller NUL name`, see SessionSlots.place) as its key and name. */
function keyAndName(named: string): { key: string; name: string } {
  const at = named.indexOf("\u0000");
  return { key: named.slice(0, at), name: named.slice(at + 1) };
}

function holderOf(slot: Readonly<SlotState>): { holder?: SlotHolder } {
  if (slot.session !== undefined) {
    const { key, name } = keyAndName(slot.session);
    return { holder: { key, session: name } };
  }
  if (slot.opening !== undefined) {
    const { key, name } = keyAndName(slot.opening);
    return { holder: { key, opening: name } };
  }
  return slot.prefix !== undefined ? { holder: { start: true } } : {};
}

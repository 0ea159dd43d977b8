import type { RunnerProcess } from "./types.ts";
import type { Watchdog, Watched } from "./watchdog.ts";

// A request's hold on a slot of a runner: the runner's fetch, what tells the request that the runner
// died, and what tells the runner's watchdog that the runner is alive.

/** One request's hold on a runner slot; released when the response body ends. */
export interface Lease {
  readonly fetch: typeof fetch;
  /** Why the runner ended, once it has (for the error a client gets). */
  readonly exited: Promise<Error>;
  /** Whether the runner's process runs at this moment. */
  running(): boolean;
  /**
   * Aborts when the runner's process ends on its own, or is killed for not answering (the reason is
   * then the error for the client). Not every runtime's fetch notices a peer that died in the
   * middle of a body (undici under Deno waits on), so a request listens for this too.
   */
  readonly died: AbortSignal;
  /**
   * The request is being sent (`stream`: its answer comes as SSE): from now until its release the
   * runner's watchdog counts it, and each `heard` (the answer's headers, each chunk) as a sign of life.
   */
  sending(stream: boolean): void;
  heard(chunk?: Uint8Array): void;
  release(): void;
  /** The slot the request is sent to (llama-server's `id_slot`); none: llama-server picks (see affinity.ts). */
  readonly slot?: number;
  /** What must be done on the runner before the request is sent (a follower's copy: see prefix-copies.ts). */
  readonly ready?: (signal: AbortSignal) => Promise<unknown>;
  /**
   * A leader's (see prefix-copies.ts): told once its prompt was processed alone in its slot (a
   * request that generates nothing), so that its followers copy the start now, not after its
   * answer; resolves when the request itself may be sent (its slot saved for them).
   */
  readonly prefilled?: (signal: AbortSignal) => Promise<void>;
}

/** Where a lease's request goes, and what precedes it (see Lease). */
export type LeaseSlot = Pick<Lease, "slot" | "ready" | "prefilled">;

/** A lease on `process`; `released` runs once, at the first `release`. */
export function createLease(process: RunnerProcess, died: AbortSignal, watchdog: Watchdog | undefined, released: () => void, slot: LeaseSlot = {}): Lease {
  return new SlotLease(process, died, watchdog, released, slot);
}

// A class, not an object of closures: every request takes one, and its methods are then shared.
class SlotLease implements Lease {
  readonly fetch: typeof fetch;
  readonly exited: Promise<Error>;
  readonly died: AbortSignal;
  readonly slot?: number;
  readonly ready?: LeaseSlot["ready"];
  readonly prefilled?: LeaseSlot["prefilled"];
  readonly #process: RunnerProcess;
  readonly #watchdog: Watchdog | undefined;
  #watched: Watched | undefined;
  #released: (() => void) | undefined;

  constructor(process: RunnerProcess, died: AbortSignal, watchdog: Watchdog | undefined, released: () => void, { slot, ready, prefilled }: LeaseSlot) {
    this.fetch = process.fetch;
    this.exited = process.exited;
    this.died = died;
    if (slot !== undefined) this.slot = slot;
    if (ready) this.ready = ready;
    if (prefilled) this.prefilled = prefilled;
    this.#process = process;
    this.#watchdog = watchdog;
    this.#released = released;
  }

  running(): boolean {
    return this.#process.running();
  }

  sending(stream: boolean): void {
    this.#watched = this.#watchdog?.track(stream);
  }

  heard(chunk?: Uint8Array): void {
    this.#watched?.heard(chunk);
  }

  release(): void {
    const released = this.#released;
    if (!released) return;
    this.#released = undefined;
    this.#watched?.end();
    released();
  }
}

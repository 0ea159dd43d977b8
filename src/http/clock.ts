import { setTimeout } from "node:timers";

// Timers for waits that many requests make at once, each of one length (a call's deadline, a
// request's time limit): one runtime timer per length, not one per wait.

/**
 * Time as a request needs it: a timer it can cancel. Injected where tests move time themselves
 * instead of waiting for it.
 */
export type Clock = { after(ms: number, fire: () => void): () => void };

/** One wait that is started again and again (a chunk handed over) and stopped (it was read), made once. */
export type Watch = { start(): void; stop(): void };

/** A clock whose waits can also be one watch, restarted without a new wait each time. */
export type QueuedClock = Clock & {
  /** Fires `fire` `ms` after its last start, unless stopped (or started again) before. */
  watch(ms: number, fire: () => void): Watch;
};

/**
 * What a queued clock runs on: the time in ms, and the runtime's timers; `hold(timer, false)` lets a
 * timer stay armed without keeping the process up (unref), `hold(timer, true)` makes it keep it up again.
 */
export type TimerHost = { now(): number; set(fire: () => void, ms: number): unknown; hold(timer: unknown, held: boolean): void };

// node:timers' (Node, Bun and Deno alike): a timer that can be unref'd and ref'd again.
const runtimeTimers: TimerHost = {
  now: () => performance.now(),
  set: (fire, ms) => setTimeout(fire, ms),
  hold: (timer, held) => void (held ? (timer as NodeJS.Timeout).ref() : (timer as NodeJS.Timeout).unref()),
};

/** A pending wait: due at `at`, linked in the order it was set; `done` once fired or cancelled. */
type Entry = { at: number; fire: () => void; done: boolean; prev?: Entry; next?: Entry };

/**
 * A clock that keeps one runtime timer for all the waits of one length: the album's calls all wait
 * `PHOTOS_API_TIMEOUT_MS`, inference requests their time limit, so they fall due in the order they
 * were set, and a queue in that order needs a timer for its head only. With 32 calls in flight, a
 * timer set and cleared per call cost Deno 10–16 µs a call (Node and Bun up to 1.1), the queue
 * 0.5–1.4: on Deno, up to a tenth of an album's CPU. A wait that ends is unlinked at once; the
 * timer, armed for a head that has gone, finds the next head when it fires and is armed again for
 * it. When its queue empties it is not cleared but let go (unref'd: nothing keeps the process up),
 * and held again by the next wait. A stream's unread-chunk watch (relay.ts) waits from each chunk
 * handed over to its read, and empties its queue at nearly every read (the client reads at once):
 * a runtime timer set and cleared per chunk, and a wait made per chunk, were 15 KB of the 158 KB
 * Node allocated for a 32-token stream (bench:inference, load `long`). A watch is one wait,
 * relinked at the tail each time it starts (waits of one length stay in order).
 */
export function queuedClock(host: TimerHost = runtimeTimers): QueuedClock {
  const queues = new Map<number, WaitQueue>();
  const queueOf = (ms: number) => {
    let queue = queues.get(ms);
    if (!queue) queues.set(ms, (queue = new WaitQueue(host)));
    return queue;
  };
  return {
    after: (ms, fire) => queueOf(ms).add(ms, fire),
    watch: (ms, fire) => queueOf(ms).watch(ms, fire),
  };
}

/** The waits of one length, oldest first, and the one timer armed for the oldest. */
class WaitQueue {
  #head: Entry | undefined;
  #tail: Entry | undefined;
  #timer: unknown;
  /** Whether the timer keeps the process up: while the queue has waits. */
  #held = false;
  readonly #host: TimerHost;

  constructor(host: TimerHost) {
    this.#host = host;
  }

  add(ms: number, fire: () => void): () => void {
    const entry: Entry = { at: 0, fire, done: true };
    this.#start(entry, ms);
    return () => this.#stop(entry);
  }

  watch(ms: number, fire: () => void): Watch {
    const entry: Entry = { at: 0, fire, done: true };
    return { start: () => this.#start(entry, ms), stop: () => this.#stop(entry) };
  }

  /** Links `entry` at the tail, due `ms` from now (unlinked first if it waits already). */
  #start(entry: Entry, ms: number): void {
    if (!entry.done) this.#unlink(entry);
    entry.at = this.#host.now() + ms;
    entry.done = false;
    entry.prev = this.#tail;
    if (this.#tail) this.#tail.next = entry;
    else this.#head = entry;
    this.#tail = entry;
    if (this.#timer === undefined) [this.#timer, this.#held] = [this.#host.set(this.#due, ms), true];
    else if (!this.#held) this.#hold(true);
  }

  #stop(entry: Entry): void {
    if (entry.done) return;
    this.#unlink(entry);
    if (!this.#head && this.#timer !== undefined) this.#hold(false);
  }

  readonly #due = () => {
    const now = this.#host.now();
    let head = this.#head;
    while (head && head.at <= now) {
      this.#unlink(head);
      head.fire();
      head = this.#head;
    }
    this.#timer = head ? this.#host.set(this.#due, Math.max(1, Math.ceil(head.at - now))) : undefined;
    this.#held = this.#timer !== undefined;
  };

  #hold(held: boolean): void {
    this.#held = held;
    this.#host.hold(this.#timer, held);
  }

  #unlink(entry: Entry): void {
    if (entry.prev) entry.prev.next = entry.next;
    else this.#head = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    else this.#tail = entry.prev;
    entry.prev = entry.next = undefined;
    entry.done = true;
  }
}

export const systemClock: QueuedClock = queuedClock();

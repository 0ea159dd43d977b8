// Timers for waits that many requests make at once, each of one length (a call's deadline, a
// request's time limit): one runtime timer per length, not one per wait.

/**
 * Time as a request needs it: a timer it can cancel. Injected where tests move time themselves
 * instead of waiting for it.
 */
export type Clock = { after(ms: number, fire: () => void): () => void };

/** What a queued clock runs on: the time in ms, and the runtime's timers. */
export type TimerHost = { now(): number; set(fire: () => void, ms: number): unknown; clear(timer: unknown): void };

const runtimeTimers: TimerHost = {
  now: () => performance.now(),
  set: (fire, ms) => setTimeout(fire, ms),
  clear: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout>),
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
 * it, and is cleared when its queue empties (so nothing keeps the process up).
 */
export function queuedClock(host: TimerHost = runtimeTimers): Clock {
  const queues = new Map<number, WaitQueue>();
  return {
    after(ms, fire) {
      let queue = queues.get(ms);
      if (!queue) queues.set(ms, (queue = new WaitQueue(host)));
      return queue.add(ms, fire);
    },
  };
}

/** The waits of one length, oldest first, and the one timer armed for the oldest. */
class WaitQueue {
  #head: Entry | undefined;
  #tail: Entry | undefined;
  #timer: unknown;
  readonly #host: TimerHost;

  constructor(host: TimerHost) {
    this.#host = host;
  }

  add(ms: number, fire: () => void): () => void {
    const entry: Entry = { at: this.#host.now() + ms, fire, done: false, prev: this.#tail };
    if (this.#tail) this.#tail.next = entry;
    else this.#head = entry;
    this.#tail = entry;
    if (this.#timer === undefined) this.#timer = this.#host.set(this.#due, ms);
    return () => {
      if (entry.done) return;
      this.#unlink(entry);
      if (!this.#head && this.#timer !== undefined) {
        this.#host.clear(this.#timer);
        this.#timer = undefined;
      }
    };
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
  };

  #unlink(entry: Entry): void {
    if (entry.prev) entry.prev.next = entry.next;
    else this.#head = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    else this.#tail = entry.prev;
    entry.prev = entry.next = undefined;
    entry.done = true;
  }
}

export const systemClock: Clock = queuedClock();

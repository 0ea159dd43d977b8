import { unlessAborted } from "../http/abort.ts";

// Requests waiting for room to launch a runner: who waits for which runner (the launch plan bounds
// them), how many interactive requests wait for any (batch launches wait until none does), and the
// wake-up when room may have come (a runner idle or gone, or a kept runner free for batch work).

export function createRoomWaits() {
  const wakers = new Set<() => void>();
  /** Runner key -> requests waiting for room to launch it: as many as its slots and queue hold. */
  const waitingFor = new Map<string, number>();
  /**
   * Interactive requests waiting for room to launch any runner, from their first wait until they
   * have their runner (or give up): batch launches wait until none does (see launch-plan.ts).
   */
  let interactive = 0;

  /** Every waiter plans again. */
  const notify = () => {
    const waiters = [...wakers];
    wakers.clear();
    for (const wake of waiters) wake();
  };

  /** Until `notify`, or (`until`) a runner kept for interactive users is free for batch work. */
  function woken(signal?: AbortSignal, until?: number): Promise<void> {
    let wake!: () => void;
    const came = new Promise<void>((resolve) => (wake = resolve));
    wakers.add(wake);
    // No event marks that time: a timer does. The waiting request keeps the process up, not it.
    const timer = until === undefined ? undefined : setTimeout(() => (wakers.delete(wake), wake()), until - Date.now());
    (timer as { unref?: () => void } | undefined)?.unref?.();
    return unlessAborted(came, signal, () => wakers.delete(wake)).finally(() => clearTimeout(timer));
  }

  return {
    notify,
    waitingFor: (key: string) => waitingFor.get(key) ?? 0,
    interactiveWaiting: () => interactive,
    /** Waits for room to launch `key`, counted among those waiting for it (each count told to `counted`). */
    async wait(key: string, signal?: AbortSignal, until?: number, counted?: (waiting: number) => void): Promise<void> {
      const count = (n: number) => {
        if (n > 0) waitingFor.set(key, n);
        else waitingFor.delete(key);
        counted?.(n);
      };
      count((waitingFor.get(key) ?? 0) + 1);
      try {
        await woken(signal, until);
      } finally {
        count(waitingFor.get(key)! - 1);
      }
    },
    /** An interactive request starts waiting for room (once per request). */
    interactiveWaits: () => void interactive++,
    /** It has its runner, or gave up: the batch launches that waited behind the last plan again. */
    interactiveDone: () => {
      if (--interactive === 0) notify();
    },
  };
}

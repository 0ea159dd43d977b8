// A request body may take as long as it takes to arrive, but may not stop arriving: a 40 GB model
// archive at 100 MB/s takes seven minutes, and node:http's total deadline (requestTimeout, 300 s)
// cut it; a body trickled slowly, or one that stopped, held a connection for ever under Bun. So
// every runtime gives each body the same idle deadline: `idleMs` without a byte while we wait for
// one fails its read with the caller's error. Time we spend not reading (a full queue, a slow
// disk behind it) is not the client's, and does not count.

/** How a listener bounds a request body: the silence allowed, and the error a read then fails with (the caller's own shape). */
export type BodyDeadline = { idleMs: number; stalled: (idleMs: number) => unknown };

export type IdleClock = {
  /** We wait for bytes from now (a read began, or a chunk came and more are wanted). */
  wait(): void;
  /** We stopped asking for bytes: silence from here is ours, not the client's. */
  hold(): void;
  /** The body ended, failed or was given up: never fires. */
  stop(): void;
};

/**
 * Calls `onIdle` once when `idleMs` passed since the last `wait()` with no `hold()` or `stop()` in
 * between. One timer for a whole body, re-armed only when it fires, not one per chunk (a large
 * upload comes in hundreds of thousands of them).
 */
export function idleClock(idleMs: number, onIdle: () => void): IdleClock {
  let since = 0; // when the current wait began or its last byte came; 0 while not waiting
  let timer: ReturnType<typeof setTimeout> | undefined;
  const check = () => {
    timer = undefined;
    if (since === 0) return;
    const left = since + idleMs - Date.now();
    if (left > 0) timer = setTimeout(check, left);
    else {
      since = 0;
      onIdle();
    }
  };
  return {
    wait() {
      since = Date.now();
      timer ??= setTimeout(check, idleMs);
    },
    hold() {
      since = 0; // the armed timer, if any, finds nothing to do and is not re-armed
    },
    stop() {
      since = 0;
      clearTimeout(timer);
      timer = undefined;
    },
  };
}

// Listening for a signal's abort, on every request's path.

/**
 * Calls `listener` when `signal` aborts; its caller removes it when it no longer cares. No options,
 * not even `{ once: true }`: under Node any options object costs a validated copy per listener
 * (its EventTarget skips that work only when none is given), and an abort fires once anyway.
 */
export function listenForAbort(signal: AbortSignal, listener: () => void): void {
  signal.addEventListener("abort", listener);
}

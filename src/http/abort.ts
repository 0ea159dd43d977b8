// Waiting on something that may outlive the one who waits for it.

/** Settles as `work` does, or rejects as soon as `signal` aborts (then `onAbort` runs; `work` goes on). */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined, onAbort?: () => void): Promise<T> {
  if (!signal) return work;
  return new Promise<T>((resolve, reject) => {
    const abort = () => (onAbort?.(), reject(signal.reason));
    if (signal.aborted) return abort();
    signal.addEventListener("abort", abort, { once: true });
    // The listener goes in the same callbacks that settle: a `.finally` would add three promises
    // and two jobs to every chunk a stream relays.
    work.then(
      (value) => {
        signal.removeEventListener("abort", abort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", abort);
        reject(error);
      },
    );
  });
}

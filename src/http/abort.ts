import { listenForAbort } from "../runtime/abort-listener.ts";

// Waiting on something that may outlive the one who waits for it.

/** Settles as `work` does, or rejects as soon as `signal` aborts (then `onAbort` runs; `work` goes on). */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined, onAbort?: () => void): Promise<T> {
  if (!signal) return work;
  return new Promise<T>((resolve, reject) => {
    const abort = () => (onAbort?.(), reject(signal.reason));
    if (signal.aborted) return abort();
    listenForAbort(signal, abort);
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

/**
 * A signal that aborts as soon as any of `signals` does, with its reason, or when `abort` is
 * called; `dispose` stops it listening. AbortSignal.any does the same, but under Node it keeps
 * weak references and a registry per signal, a measurable share of each inference request's CPU
 * there (bench:runtimes).
 */
export function anySignal(signals: AbortSignal[]): { signal: AbortSignal; dispose(): void; abort(reason: unknown): void } {
  const controller = new AbortController();
  const aborted = signals.find((signal) => signal.aborted);
  if (aborted) {
    controller.abort(aborted.reason);
    return { signal: controller.signal, dispose: () => {}, abort: () => {} };
  }
  const listeners = signals.map((signal) => () => (dispose(), controller.abort(signal.reason)));
  const dispose = () => signals.forEach((signal, i) => signal.removeEventListener("abort", listeners[i]!));
  signals.forEach((signal, i) => listenForAbort(signal, listeners[i]!));
  const abort = (reason: unknown) => (dispose(), controller.abort(reason));
  return { signal: controller.signal, dispose, abort };
}

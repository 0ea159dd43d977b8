import type { Clock } from "../http/clock.ts";
import { listenForAbort } from "../runtime/abort-listener.ts";

/**
 * One signal for an upstream call that aborts when the client goes away or when `ms` pass,
 * whichever comes first. `AbortSignal.any` with `AbortSignal.timeout` does the same, but its timer
 * cannot be cleared: under load every finished request would leave one pending for the full
 * timeout. `finish()` frees the timer and the listener as soon as the call is over.
 */
export function deadline(clientSignal: AbortSignal, ms: number, clock: Clock) {
  const controller = new AbortController();
  let expired = false;
  const onClientGone = () => controller.abort(clientSignal.reason);
  const cancelTimer = clock.after(ms, () => {
    expired = true;
    controller.abort(new DOMException(`no answer within ${ms} ms`, "TimeoutError"));
  });
  if (clientSignal.aborted) onClientGone();
  else listenForAbort(clientSignal, onClientGone);
  return {
    signal: controller.signal,
    expired: () => expired,
    finish() {
      cancelTimer();
      clientSignal.removeEventListener("abort", onClientGone);
    },
  };
}

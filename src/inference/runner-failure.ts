import { clientGone, HttpError } from "../http/errors.ts";
import { describe, runnerFailed } from "../scheduler/errors.ts";
import type { Lease } from "../scheduler/runner.ts";
import type { Forwarded } from "./forward.ts";

// Why a call to a request's runner failed, in the words its client gets: the client left, the
// request ran out of time, or the runner died (and how) or stopped answering.

/** How long to wait for a dead runner's exit reason (its pipes drain) before answering without it. */
const EXIT_REASON_WAIT_MS = 1000;

/**
 * How long a runner that still seems to run has to show that it died: a killed runner's sockets
 * close as it dies, and our process may read that before it hears of the exit (both come through
 * the event loop, in either order), which made the answer "lost the connection" instead of the kill.
 */
const EXIT_NOTICE_WAIT_MS = 100;

/**
 * Why a call to the runner failed, sent or read: the client left, the request ran out of time, the
 * runner stopped answering (both are the call's reason), or the runner died (and how).
 */
export async function failure({ lease, model, request }: Forwarded, error: unknown, call: AbortSignal): Promise<HttpError> {
  if (request.signal.aborted) return clientGone();
  if (call.reason instanceof HttpError) return call.reason;
  return runnerFailed(model, await exitReason(lease, error));
}

/** Throws why the call failed. */
export async function failed(forwarded: Forwarded, error: unknown, signal: AbortSignal): Promise<never> {
  throw await failure(forwarded, error, signal);
}

/** Why the runner failed: its exit, if it died (waited for briefly: it comes with its pipes), else the error. */
async function exitReason(lease: Lease, fetchError: unknown): Promise<string> {
  const lost = `lost the connection (${describe(fetchError)})`;
  const wait = lease.running() ? EXIT_NOTICE_WAIT_MS : EXIT_REASON_WAIT_MS;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const later = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), wait)));
  const exit = await Promise.race([lease.exited, later]);
  clearTimeout(timer);
  return exit ? describe(exit) : lost;
}


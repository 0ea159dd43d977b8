import { errorResponse } from "../http/errors.ts";
import type { FetchHandler } from "../runtime/types.ts";

// Graceful termination as Kubernetes expects it: on SIGTERM the pod stays reachable while its
// endpoint is taken out of rotation, so a request that still arrives gets a 503 JSON answer it
// can retry elsewhere (not a refused connection), readiness fails at once, and the work in
// flight finishes before the listeners close and the runners stop.

export interface Drain {
  /** True once draining began. */
  readonly draining: boolean;
  /** `handler`, answering 503 to every new request once draining, except on `openPaths`. */
  wrap(handler: FetchHandler, openPaths: string[]): FetchHandler;
  /** Begins draining; resolves when `idle()` holds (polled) or `graceMs` passed, whichever comes first. */
  drain(graceMs: number, idle: () => boolean): Promise<void>;
}

/** How often the work in flight is looked at while draining: cheap, and well under any grace period. */
const POLL_MS = 100;

export function createDrain(): Drain {
  let draining = false;
  return {
    get draining() {
      return draining;
    },
    wrap(handler, openPaths) {
      return (request) => {
        if (!draining || openPaths.includes(new URL(request.url).pathname)) return handler(request);
        return errorResponse(503, "unavailable_error", "shutting_down", "the server is shutting down; retry on another replica", {
          "retry-after": "1",
          connection: "close",
        });
      };
    },
    async drain(graceMs, idle) {
      draining = true;
      const deadline = Date.now() + graceMs;
      while (!idle() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, Math.min(POLL_MS, deadline - Date.now())));
    },
  };
}

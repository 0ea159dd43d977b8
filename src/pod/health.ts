import { errorResponse } from "../http/errors.ts";
import type { Route } from "../http/router.ts";

// Kubernetes probes: `/livez` (the process serves: nothing else is checked, so a busy or loading
// server is never restarted for it) and `/readyz` (send me traffic: not draining, the store
// readable, every pinned model's runner ready). Both cheap: no runner is called.

export const HEALTH_PATHS = ["/livez", "/readyz"];

export type HealthDeps = {
  draining: () => boolean;
  /** Why the store cannot be used, or undefined. */
  storeProblem: () => Promise<string | undefined>;
  /** Why the pinned models are not all ready, or undefined. */
  pinnedProblem: () => string | undefined;
};

const ok = (status: string) => Response.json({ status });

export function healthRoutes(deps: HealthDeps): Route[] {
  async function ready(): Promise<Response> {
    const problem = deps.draining() ? "shutting down" : (deps.pinnedProblem() ?? (await deps.storeProblem()));
    if (problem === undefined) return ok("ready");
    return errorResponse(503, "unavailable_error", "not_ready", `not ready: ${problem}`);
  }
  return [
    { method: "GET", path: "/livez", handle: () => ok("alive") },
    { method: "GET", path: "/readyz", handle: ready },
  ];
}

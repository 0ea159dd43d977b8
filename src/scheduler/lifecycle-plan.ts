import type { HttpError } from "../http/errors.ts";
import { modelInUse, modelPinned } from "./errors.ts";
import type { Keys, RunnerSnapshot } from "./launch-plan.ts";
import { threadShare } from "./policy.ts";

// The decisions of a runner's life after its launch, pure: what follows when it expires, crashes,
// stops answering or is replaced; which runners a new share of the cores replaces; how long a request keeps it;
// what an unload or a delete may take. The scheduler applies them in the step that asks.

export type RunnerEvent =
  /** Idle for its keep-alive. */
  | "expired"
  /** Its process ended without being asked to. */
  | "crashed"
  /** Taken out of service (reloaded, above its share of the cores, or another context asked): it finishes its requests. */
  | "replaced"
  /** It stopped answering (see watchdog.ts) and is being killed: out of service at once. */
  | "unresponsive"
  /** Stopped as asked, or its load failed. */
  | "stopped";

/** What follows the event: unload the runner, launch its (model, mode) again, or nothing. */
export type AfterEvent = "unload" | "relaunch" | "nothing";

export function planAfter(event: RunnerEvent, { pinned, closed }: { pinned: boolean; closed: boolean }): AfterEvent {
  switch (event) {
    // A runner loaded before it was pinned still has its keep-alive timer: pinned, it stays.
    case "expired":
      return pinned ? "nothing" : "unload";
    // A pinned runner that went away comes back at once (not on the next request), unless the
    // scheduler is closing.
    case "crashed":
    case "replaced":
      return pinned && !closed ? "relaunch" : "nothing";
    // Its kill ends as a crash (`gone`), which relaunches it if pinned.
    case "unresponsive":
      return "nothing";
    // A load that failed is not retried here (it would fail again at once); readiness asks again.
    case "stopped":
      return "nothing";
  }
}

/**
 * The cores are shared among the runners in service: one whose automatic thread count is above its
 * share now that another runner joined is replaced (it finishes its requests first; the next
 * request loads it with its share). A lasting oversubscription costs far more than one reload.
 */
export function planRebalance(runners: RunnerSnapshot[], cores: number): string[] {
  const serving = runners.filter((r) => !r.leaving);
  const share = threadShare(cores, serving.length);
  return serving.filter((r) => r.state === "ready" && !r.threadsFixed && r.threads > share).map((r) => r.name);
}

/**
 * The keep-alive a request leaves its runner with: the one it asked for (as Ollama's keep_alive),
 * else the runner's configured one; none for a pinned runner, which never expires.
 */
export function keepAliveAfterRequest(pinned: boolean, requested: string | undefined, configured: string): string | undefined {
  return pinned ? undefined : (requested ?? configured);
}

/** An unload takes the idle runners in service, never a pinned one. */
export const unloadable = (runner: RunnerSnapshot, pinned: Keys): boolean =>
  !runner.leaving && !runner.busy && !pinned.has(runner.key);

/**
 * Deleting a model: refused while it is pinned (409: its replica would stay unready for good) or
 * while one of its runners serves (409); else every runner of it is unloaded first.
 */
export function planDelete(runners: RunnerSnapshot[], pinned: boolean, model: string): { kind: "unload"; names: string[] } | { kind: "refuse"; error: HttpError } {
  if (pinned) return { kind: "refuse", error: modelPinned(model) };
  if (runners.some((r) => r.busy)) return { kind: "refuse", error: modelInUse(model) };
  return { kind: "unload", names: runners.map((r) => r.name) };
}

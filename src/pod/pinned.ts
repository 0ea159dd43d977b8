import { ownRequest } from "../http/guard.ts";
import type { FetchHandler } from "../runtime/types.ts";
import type { Scheduler } from "../scheduler/scheduler.ts";
import type { ModelRef } from "../scheduler/types.ts";

// Pinned models (PINNED_MODELS): the shape of a replica in an inference pool. Each is pulled at start
// if the store lacks it (an init container usually did that already), loaded, and kept loaded
// (the scheduler never evicts a pinned runner); readiness waits for all of them. Other models are
// refused with 404 unless ALLOW_UNPINNED_MODELS is set.

export type PinnedDeps = {
  references: string[];
  allowUnpinned: boolean;
  store: { resolve(reference: string): Promise<ModelRef | undefined> };
  /** Pulls a model into the store; rejects with the reason it failed. */
  pull: (reference: string) => Promise<void>;
  log: (line: string) => void;
};

export interface Pinned {
  /** Whether requests for this model are served. */
  admits(modelId: string): boolean;
  /** Pulls and pins every model in the background, each retried until it succeeds or `stop`. */
  start(scheduler: Pick<Scheduler, "pin" | "preload" | "runners">): void;
  /** Why the pinned models are not all ready, or undefined; a runner that failed to load is tried again. */
  problem(): string | undefined;
  stop(): void;
}

/** Pause before a failed pull or load is tried again. */
const RETRY_MS = 5_000;
const MODE = "completion";

export function createPinned(deps: PinnedDeps): Pinned {
  const resolved = new Map<string, ModelRef>();
  let scheduler: Pick<Scheduler, "pin" | "preload" | "runners"> | undefined;
  let stopped = false;

  async function pinOne(reference: string): Promise<void> {
    while (!stopped) {
      try {
        let model = await deps.store.resolve(reference);
        if (!model) {
          deps.log(`pinned model ${reference}: pulling`);
          await deps.pull(reference);
          model = await deps.store.resolve(reference);
          if (!model) throw new Error("not in the store after its pull");
        }
        resolved.set(reference, model);
        await scheduler!.pin(model, MODE);
        return deps.log(`pinned model ${reference}: ready`);
      } catch (error) {
        deps.log(`pinned model ${reference}: ${(error as Error).message}; trying again in ${RETRY_MS / 1000} s`);
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      }
    }
  }

  return {
    admits: (modelId) => deps.allowUnpinned || deps.references.length === 0 || [...resolved.values()].some((m) => m.id === modelId),
    start(given) {
      scheduler = given;
      for (const reference of deps.references) void pinOne(reference);
    },
    problem() {
      const runners = scheduler?.runners() ?? [];
      for (const reference of deps.references) {
        const model = resolved.get(reference);
        if (!model) return `pinned model ${reference} is not in the store yet`;
        if (!runners.some((r) => r.modelId === model.id && r.mode === MODE && r.pinned && r.state === "ready")) {
          // A pinned runner that failed to load is not retried by the scheduler (it would fail at
          // once again): the probe, every few seconds, asks for it (a no-op while one loads).
          scheduler?.preload(model, MODE);
          return `pinned model ${reference} is loading`;
        }
      }
      return undefined;
    },
    stop: () => void (stopped = true),
  };
}

/** A pull through the model runner's own `POST /models/create` route, in process (an admin's: the process's own). */
export function pullThrough(handler: FetchHandler): (reference: string) => Promise<void> {
  return async (reference) => {
    const response = await handler(
      ownRequest(
        new Request("http://localhost/models/create", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ from: reference }),
        }),
      ),
    );
    const text = await response.text();
    if (!response.ok) throw new Error((JSON.parse(text) as { error: { message: string } }).error.message);
    const last = JSON.parse(text.trim().split("\n").at(-1) ?? "{}") as { type?: string; message?: string };
    if (last.type !== "success") throw new Error(last.message ?? "the pull ended without success");
  };
}

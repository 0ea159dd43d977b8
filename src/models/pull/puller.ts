import { DigestMismatchError } from "../store/blobs.ts";
import type { ModelStore } from "../store/store.ts";
import type { PullEvent, PullPlan } from "./plan.ts";
import { progressReporter } from "./progress.ts";

// Runs pulls: one job per model name, so a second request for a model being pulled joins the
// running job and sees its progress. A job is cancelled when its last listener goes away; blobs
// it had partly downloaded stay as `.incomplete` files for the next pull to resume.

export type Listener = (event: PullEvent) => void;

export type PullJob = {
  /** Adds a listener; returns the function that removes it (the last removal cancels the job). */
  listen(listener: Listener): () => void;
  /** Settles when the job has ended (its last event is then `success` or `error`). */
  done: Promise<void>;
};

export type Planner = (signal: AbortSignal) => Promise<PullPlan>;

type Job = PullJob & { ready: Promise<void> };

async function runPlan(store: ModelStore, plan: PullPlan, emit: Listener, signal: AbortSignal): Promise<void> {
  if (await store.resolve(plan.id)) {
    await store.addTag(plan.id, plan.key);
    emit({ type: "success", message: `Using cached model: ${plan.key}`, mode: "pull" });
    return;
  }
  const unpin = store.pin(plan.layers.map((l) => l.digest));
  try {
    const total = plan.layers.reduce((sum, l) => sum + l.size, 0);
    const report = progressReporter(total, emit);
    const failed = new AbortController();
    const layerSignal = AbortSignal.any([signal, failed.signal]);
    await Promise.all(
      plan.layers.map((layer) =>
        store
          .downloadBlob({ digest: layer.digest, size: layer.size, source: layer.source, signal: layerSignal, onProgress: (bytes) => report(layer, bytes) })
          .then(() => report(layer, layer.size, true))
          .catch((error: unknown) => {
            failed.abort(error);
            if (error instanceof DigestMismatchError || signal.aborted) throw error;
            throw new Error(`download of ${layer.digest} failed (a new pull resumes it): ${describeFailure(error)}`);
          }),
      ),
    );
    const record = await plan.describe(signal);
    await store.add({ ...record, manifest: plan.manifest, tag: plan.key });
    emit({ type: "success", message: "Model pulled successfully", total, mode: "pull" });
  } finally {
    unpin();
  }
}

function describeFailure(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export type Puller = {
  /** Starts (or joins) the pull of `key`; rejects with the planning error, before any event. */
  start(key: string, plan: Planner): Promise<PullJob>;
};

export function createPuller(store: ModelStore): Puller {
  const jobs = new Map<string, Job>();

  function createJob(key: string, planner: Planner): Job {
    const listeners = new Set<Listener>();
    const controller = new AbortController();
    // The last event is replayed to a listener that joins after the end.
    let final: PullEvent | undefined;
    const emit: Listener = (event) => {
      if (event.type === "success" || event.type === "error") final = event;
      for (const listener of listeners) listener(event);
    };
    let planned = () => {};
    const ready = new Promise<void>((resolve) => (planned = resolve));
    const work = (async () => {
      const plan = await planner(controller.signal);
      planned();
      await runPlan(store, plan, emit, controller.signal);
    })();
    const done = work.then(
      () => {},
      (error: unknown) => {
        if (!controller.signal.aborted) emit({ type: "error", message: describeFailure(error), mode: "pull" });
      },
    );
    void done.finally(() => {
      if (jobs.get(key) === job) jobs.delete(key);
    });
    const job: Job = {
      ready: Promise.race([ready, work.then(() => {})]),
      done,
      listen(listener) {
        if (final) listener(final);
        listeners.add(listener);
        return () => {
          listeners.delete(listener);
          if (listeners.size > 0) return;
          controller.abort(new Error("the client went away"));
          // A cancelled job ends without a last event: the next pull of this model starts afresh.
          if (jobs.get(key) === job) jobs.delete(key);
        };
      },
    };
    return job;
  }

  return {
    async start(key, planner) {
      const job = jobs.get(key) ?? createJob(key, planner);
      jobs.set(key, job);
      await job.ready;
      return job;
    },
  };
}

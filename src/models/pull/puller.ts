import { unlessAborted } from "../../http/abort.ts";
import { clientGone } from "../../http/errors.ts";
import { CorruptBlobError } from "../store/blobs.ts";
import { refuseWithoutRoom } from "../store/room.ts";
import { DEFAULT_PART_SETTINGS, type PartSettings } from "../store/parts.ts";
import type { ModelStore } from "../store/store.ts";
import type { PullEvent, PullPlan } from "./plan.ts";
import { progressReporter } from "./progress.ts";
import { createSlots, DEFAULT_MAX_CONCURRENT_PULLS } from "./slots.ts";

// Runs pulls: one job per model name, so a second request for a model being pulled joins the
// running job and sees its progress. A job is cancelled when its last listener goes away; blobs
// it had partly downloaded stay as `.incomplete` files for the next pull to resume. At most
// `maxConcurrent` jobs run at once (a joined job counts once); the others wait their turn, and
// one whose every caller left while it waited is dropped without having run.

export type Listener = (event: PullEvent) => void;

export type PullJob = {
  /** Adds a listener; returns the function that removes it (the last removal cancels the job). */
  listen(listener: Listener): () => void;
  /** Settles when the job has ended (its last event is then `success` or `error`). */
  done: Promise<void>;
};

export type Planner = (signal: AbortSignal) => Promise<PullPlan>;

type Job = PullJob & {
  /** What the job has done so far, for the pulls in progress. */
  status(): PullStatus;
  /** Waits until the job is planned; a caller whose signal aborts first stops waiting (rejects). */
  wait(signal?: AbortSignal): Promise<void>;
};

/** A pull in progress as the status page and the events stream show it: each layer's bytes so far. */
export type PullStatus = { model: string; layers: { id: string; size: number; current: number }[] };

export type PullerOptions = {
  maxConcurrent?: number | undefined;
  /** How large blobs are split into parallel ranged parts. */
  parts?: PartSettings | undefined;
};

/** Refuses (507, before streaming) a pull whose missing bytes the store's filesystem cannot hold. */
async function checkRoom(store: ModelStore, plan: PullPlan): Promise<void> {
  const needed = await store.bytesMissing(plan.layers);
  if (needed > 0) refuseWithoutRoom(plan.key, needed, await store.freeSpace(), "model store");
}

async function runPlan(store: ModelStore, plan: PullPlan, emit: Listener, signal: AbortSignal, parts: PartSettings): Promise<void> {
  if (await store.resolve(plan.id)) {
    await store.addTag(plan.id, plan.key);
    emit({ type: "success", message: `Using cached model: ${plan.key}`, mode: "pull" });
    return;
  }
  const unpin = await store.pin([...plan.layers.map((l) => l.digest), ...(plan.config ? [plan.config] : [])]);
  try {
    const total = plan.layers.reduce((sum, l) => sum + l.size, 0);
    const report = progressReporter(total, emit);
    const failed = new AbortController();
    const layerSignal = AbortSignal.any([signal, failed.signal]);
    await Promise.all(
      plan.layers.map((layer) =>
        store
          .downloadBlob({ digest: layer.digest, size: layer.size, source: layer.source, signal: layerSignal, parts, onProgress: (bytes) => report(layer, bytes) })
          .then(() => report(layer, layer.size, true))
          .catch((error: unknown) => {
            failed.abort(error);
            if (error instanceof CorruptBlobError || signal.aborted) throw error;
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
  /**
   * Starts (or joins) the pull of `key`; resolves once it has its turn and is planned, rejects with
   * the planning error before any event. `signal` is the caller's: if it aborts meanwhile, the call
   * rejects, and a pull that nobody waits for or listens to any more is cancelled.
   */
  start(key: string, plan: Planner, signal?: AbortSignal): Promise<PullJob>;
  /** The pulls running or waiting their turn now. */
  active(): PullStatus[];
};

export function createPuller(store: ModelStore, options: PullerOptions = {}): Puller {
  const jobs = new Map<string, Job>();
  const slots = createSlots(options.maxConcurrent ?? DEFAULT_MAX_CONCURRENT_PULLS);

  function createJob(key: string, planner: Planner): Job {
    const listeners = new Set<Listener>();
    let waiting = 0;
    const controller = new AbortController();
    // A cancelled job ends without a last event: the next pull of this model starts afresh.
    const cancelIfUnwanted = () => {
      if (listeners.size > 0 || waiting > 0) return;
      controller.abort(new Error("the client went away"));
      if (jobs.get(key) === job) jobs.delete(key);
    };
    // The last event is replayed to a listener that joins after the end.
    let final: PullEvent | undefined;
    const layers = new Map<string, { id: string; size: number; current: number }>();
    const emit: Listener = (event) => {
      if (event.type === "success" || event.type === "error") final = event;
      if (event.layer) layers.set(event.layer.id, { ...event.layer });
      for (const listener of listeners) listener(event);
    };
    let planned = () => {};
    const ready = new Promise<void>((resolve) => (planned = resolve));
    const work = (async () => {
      const release = await slots.acquire(controller.signal);
      try {
        const plan = await planner(controller.signal);
        await checkRoom(store, plan);
        planned();
        await runPlan(store, plan, emit, controller.signal, options.parts ?? DEFAULT_PART_SETTINGS);
      } finally {
        release();
      }
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
    const settled = Promise.race([ready, work.then(() => {})]);
    const job: Job = {
      status: () => ({ model: key, layers: [...layers.values()] }),
      async wait(signal) {
        waiting += 1;
        try {
          await unlessAborted(settled, signal);
        } catch (error) {
          throw signal?.aborted ? clientGone("the client went away before its pull started") : error;
        } finally {
          waiting -= 1;
          if (signal?.aborted) cancelIfUnwanted();
        }
      },
      done,
      listen(listener) {
        if (final) listener(final);
        listeners.add(listener);
        return () => {
          listeners.delete(listener);
          cancelIfUnwanted();
        };
      },
    };
    return job;
  }

  return {
    active: () => [...jobs.values()].map((job) => job.status()),
    async start(key, planner, signal) {
      const job = jobs.get(key) ?? createJob(key, planner);
      jobs.set(key, job);
      await job.wait(signal);
      return job;
    },
  };
}

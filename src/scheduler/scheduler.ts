import { modelNotFound } from "../models/errors.ts";
import { RunnerGone, runnerGone, shuttingDown } from "./errors.ts";
import { unlessAborted } from "../http/abort.ts";
import { planLaunch, planServe, wantedContext } from "./launch-plan.ts";
import { launchSnapshot, readBudget, type Budget, type LaunchAsk } from "./launch-snapshot.ts";
import { keepAliveAfterRequest, planAfter, planDelete, planRebalance, unloadable, type RunnerEvent } from "./lifecycle-plan.ts";
import { runnerKey } from "./policy.ts";
import { Runner, type RunnerEvents, type RunnerOptions } from "./runner.ts";
import { memoryInUse, runnerContexts, runnerInfo, scrapeRunners } from "./views.ts";
import { fitAnswer, fitRunners } from "./fit.ts";
import { createRoomWaits } from "./room-waits.ts";
import { modelName, type Mode, type ModelRef, type RunnerWish } from "./types.ts";
import type { RunnerInfo, Scheduler, SchedulerDeps } from "./api.ts";
import { createSuccession } from "./engine-upgrade.ts";
import { Roster } from "./roster.ts";

// The coordinator: at most one runner per (model, mode), at most `maxRunners` in all, the least
// recently used idle one unloaded to make room, idle ones unloaded after their keep-alive. It is
// the single writer of the runners' state (held in roster.ts, with an upgrade's in
// engine-upgrade.ts): each decision is a pure plan (launch-plan.ts, lifecycle-plan.ts) made from a
// snapshot of that state, and applied in the same synchronous step, so no await separates a check
// from its effect.

export type { RunnerInfo, Scheduler, SchedulerDeps, SchedulerLimits, SchedulerObserver } from "./api.ts";

export function createScheduler(deps: SchedulerDeps): Scheduler {
  const roster = new Roster(() => succession.loading());
  const { active } = roster;
  const room = createRoomWaits();
  /** Model id -> deletes in progress: no runner of these launches. */
  const deleting = new Map<string, number>();
  /** Runner key -> what `pin` asked to keep loaded. */
  const pinned = new Map<string, { model: ModelRef; mode: Mode }>();
  const succession = createSuccession({ active, replace, unload: (r) => void unloadRunner(r), start, retryMs: deps.limits.engineMoveRetryMs ?? 60_000 });
  let serial = (deps.firstSerial ?? 1) - 1;
  /** Set by stopAll: no runner starts after it, so none outlives the process. */
  let closed = false;

  const info = (runner: Runner): RunnerInfo => runnerInfo(runner, pinned.has(runner.options.key), succession.failedMove(runner));

  const notifyCapacity = room.notify;

  const events: RunnerEvents = {
    idle(runner) {
      succession.idle(runner);
      notifyCapacity();
    },
    expired: (runner) => after("expired", runner),
    loaded(runner, ms) {
      deps.observe?.loaded?.(runner.options.model, runner.options.mode, ms);
      succession.loaded(runner);
      for (const name of planRebalance(roster.snapshots(), deps.limits.cpuCores)) replace(roster.named(name)!);
    },
    loadFailed(runner, error) {
      deps.observe?.loadFailed?.(runner.options.model, runner.options.mode);
      succession.failed(runner, (error as Error)?.message ?? String(error));
    },
    gone(runner, crashed) {
      roster.gone(runner);
      succession.failed(runner, "it stopped before it was ready");
      if (crashed) deps.observe?.crashed?.(runner.options.model, runner.options.mode);
      notifyCapacity();
      after(crashed ? "crashed" : "stopped", runner);
    },
    unresponsive(runner) {
      roster.retire(runner);
      after("unresponsive", runner);
    },
  };

  /** Applies what follows an event in the runner's life. */
  function after(event: RunnerEvent, runner: Runner): void {
    const plan = planAfter(event, { pinned: pinned.has(runner.options.key), closed });
    if (plan === "unload") void unloadRunner(runner);
    if (plan === "relaunch") {
      const pin = pinned.get(runner.options.key)!;
      preload(pin.model, pin.mode);
    }
  }

  function unloadRunner(runner: Runner): Promise<void> {
    roster.retire(runner);
    return runner.stop();
  }

  /** Takes a runner out of service: it finishes what it serves and has queued; new requests get a fresh one. */
  function replace(runner: Runner): void {
    roster.retire(runner);
    runner.drain();
    after("replaced", runner);
  }

  function preload(model: ModelRef, mode: Mode): void {
    void withRunner(model, mode, undefined, {}, () => {}).catch(() => {});
  }

  /**
   * Finds (or launches) the model's runner and hands it to `use` in the same synchronous step, so
   * that what `use` does (take a lease, join the queue) makes the runner busy before anything else
   * can evict it. A runner loaded already (most requests) is handed over in this call, without the
   * async frame a launch needs: that frame, and the promise of `use`'s promise it resolved with,
   * were several promises per request.
   */
  function withRunner<T>(model: ModelRef, mode: Mode, signal: AbortSignal | undefined, wish: RunnerWish, use: (runner: Runner) => T | Promise<T>): Promise<T> {
    const key = runnerKey(model.id, mode);
    const wanted = wantedContext(pinned.has(key), wish.contextSize);
    try {
      const existing = loadedRunner(key, model, wanted, signal);
      if (existing) return Promise.resolve(useLoaded(existing, model, mode, use));
    } catch (error) {
      return Promise.reject(error);
    }
    return launching(key, model, mode, signal, wish, wanted, use);
  }

  /** The model's runner if it is loaded and serves `wanted` (one that must be replaced for it is, now); undefined to launch. */
  function loadedRunner(key: string, model: ModelRef, wanted: ReturnType<typeof wantedContext>, signal: AbortSignal | undefined): Runner | undefined {
    signal?.throwIfAborted();
    refuseIfUnservable(model);
    const runner = active.get(key);
    // Its contexts, not its whole snapshot: every request asks this.
    const plan = planServe(runner && runnerContexts(runner), wanted);
    if (plan === "replace") replace(runner!);
    return plan === "use" ? runner : undefined;
  }

  function useLoaded<T>(existing: Runner, model: ModelRef, mode: Mode, use: (runner: Runner) => T | Promise<T>): T | Promise<T> {
    // It serves on the old build; the move that failed is tried again beside it.
    if (deps.retryMove && succession.retryDue(existing)) deps.retryMove(model, mode);
    return use(existing);
  }

  /** withRunner's way when no loaded runner serves the request: settings, budget, a launch, an eviction or a wait for room, decided afresh after each wait. */
  async function launching<T>(key: string, model: ModelRef, mode: Mode, signal: AbortSignal | undefined, wish: RunnerWish, wanted: ReturnType<typeof wantedContext>, use: (runner: Runner) => T | Promise<T>): Promise<T> {
    const lane = wish.lane ?? "interactive";
    // Read only when a launch is considered: a request for a loaded runner pays no stat.
    let budget: Budget | undefined;
    const loaded = () => loadedRunner(key, model, wanted, signal);
    let counted = false;
    try {
      for (;;) {
        // A runner loaded meanwhile (or a wait for room ended by one) is used at once.
        const existing = loaded();
        if (existing) return useLoaded(existing, model, mode, use);
        // Read on every pass: a wait for room may be long, and the model reconfigured meanwhile.
        const settings = await deps.settings.get(model.id);
        const engine = await deps.engineFor?.(model, settings);
        if (loaded()) continue;
        if (!budget) {
          budget = await readBudget(deps, model);
          continue; // what was read above may have changed meanwhile: decide afresh
        }
        const plan = planLaunch(snapshotFor({ key, lane, settings, wanted, budget, engine }), model, mode);
        if (plan.kind === "launch") return use(launch(plan.runner));
        if (plan.kind === "refuse") throw plan.error;
        // The unloads go on if the client leaves; only the wait for them ends.
        if (plan.kind === "evict") await unlessAborted(Promise.all(plan.names.map((name) => unloadRunner(roster.named(name)!))), signal);
        else {
          if (lane === "interactive" && !counted) {
            counted = true;
            room.interactiveWaits();
          }
          await room.wait(key, signal, plan.until, (n) => deps.observe?.waitingForRoom?.(modelName(model), mode, n));
        }
      }
    } finally {
      // The batch launches that waited behind it plan again.
      if (counted) room.interactiveDone();
    }
  }

  /** No runner of the model launches once the scheduler stops, nor while the model is being deleted. */
  const refuseIfUnservable = (model: ModelRef) => {
    if (closed) throw shuttingDown();
    if (deleting.has(model.id)) throw modelNotFound(modelName(model));
  };

  /** What a launch decides on: the runners as they are now (or as `runners` gives them). */
  const snapshotFor = (ask: LaunchAsk, runners = roster.snapshots()) => launchSnapshot({ runners, pinned, limits: deps.limits, room, serial }, ask);

  /** A runner started on `options`, not yet in service (see launch). */
  function start(options: RunnerOptions): Runner {
    serial++;
    return new Runner(options, deps.start, events);
  }

  function launch(options: RunnerOptions): Runner {
    const runner = start(options);
    active.set(options.key, runner);
    return runner;
  }

  return {
    acquire(model, mode, signal, wish = {}) {
      const take = (runner: Runner) => {
        const keep = keepAliveAfterRequest(pinned.has(runner.options.key), wish.keepAlive, runner.options.keepAlive);
        if (keep !== undefined) runner.keepFor(keep);
        return runner.acquire(signal, { caller: wish.caller ?? "", lane: wish.lane ?? "interactive", session: wish.session, prefix: wish.prefix, opening: wish.opening });
      };
      // A runner that goes away while this request waits in its queue (crash, reload, unload): one
      // more try on a fresh one, then a 503 the client may retry. (Callbacks, not an async frame
      // with a loop: most requests take a slot of a loaded runner at the first try.)
      return withRunner(model, mode, signal, wish, take).catch((error: unknown) => {
        if (!(error instanceof RunnerGone)) throw error;
        return withRunner(model, mode, signal, wish, take).catch((again: unknown) => {
          throw again instanceof RunnerGone ? runnerGone(modelName(model)) : again;
        });
      });
    },
    preload,
    async pin(model, mode) {
      pinned.set(runnerKey(model.id, mode), { model, mode });
      // Waits for the runner like a request would, then gives the slot straight back.
      (await this.acquire(model, mode)).release();
    },
    runners: () => roster.all().map(info),
    slotTables: () => roster.all().map((r) => ({ model: r.options.model, mode: r.options.mode, state: r.state, ...r.slotTable })),
    async memory() {
      const budget = (await deps.memory?.())?.budget;
      if (!budget) return undefined;
      return { budget, ...memoryInUse(roster.all()) };
    },
    async unload(match) {
      const idle = roster.all().filter((r) => unloadable(roster.snapshot(r), pinned) && match(info(r)));
      await Promise.all(idle.map(unloadRunner));
      return idle.length;
    },
    async whileDeleting(model, remove) {
      // The plan, the guard and taking the runners out of `active` are one synchronous step.
      const isPinned = [...pinned.values()].some((p) => p.model.id === model.id);
      const plan = planDelete(roster.ofModel(model, roster.all()).map((r) => roster.snapshot(r)), isPinned, modelName(model));
      if (plan.kind === "refuse") throw plan.error;
      deleting.set(model.id, (deleting.get(model.id) ?? 0) + 1);
      try {
        await Promise.all(plan.names.map((name) => unloadRunner(roster.named(name)!)));
        return await remove();
      } finally {
        const left = deleting.get(model.id)! - 1;
        if (left > 0) deleting.set(model.id, left);
        else deleting.delete(model.id);
      }
    },
    async upgrade(model, mode) {
      if (!deps.engineFor || !active.has(runnerKey(model.id, mode))) return { kind: "none" };
      const settings = await deps.settings.get(model.id);
      const engine = await deps.engineFor(model, settings);
      const budget = await readBudget(deps, model);
      // From here on, one synchronous step: the successor's launch is planned as a request's would be.
      const key = runnerKey(model.id, mode);
      return succession.begin(active.get(key), engine, (old) => planLaunch(snapshotFor({ key, lane: "interactive", settings, wanted: old.options.requestedContext, budget, engine }), model, mode));
    },
    reload(model) {
      for (const runner of roster.ofModel(model)) replace(runner);
    },
    async fit(model, mode, changes = {}) {
      const key = runnerKey(model.id, mode);
      const settings = { ...(await deps.settings.get(model.id)), ...changes };
      const budget = await readBudget(deps, model);
      // From here on, one synchronous step, as a launch decides.
      refuseIfUnservable(model);
      const runner = active.get(key);
      const changed = Object.keys(changes).length > 0;
      if (runner && !changed && planServe(runnerContexts(runner), undefined) === "use") return { action: "loaded", runner: info(runner) };
      const runners = fitRunners(roster.snapshots(), runner?.options.spec.name);
      const plan = planLaunch(snapshotFor({ key, lane: "interactive", settings, wanted: undefined, budget, engine: await deps.engineFor?.(model, settings) }, runners), model, mode);
      if (plan.kind === "refuse") throw plan.error;
      return fitAnswer(plan, runners, pinned, (name) => {
        const r = roster.named(name);
        return r && { model: r.options.model, mode: r.options.mode, bytes: r.options.memory?.total ?? 0 };
      });
    },
    scrape: (path) => scrapeRunners([...active.values()], path),
    async stopAll() {
      closed = true;
      // Those waiting for room wake, find the scheduler closed, and fail.
      notifyCapacity();
      await Promise.all(roster.all().map(unloadRunner));
    },
  };
}

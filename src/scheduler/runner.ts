import { estimateNote, loadFailed, queueFull, RunnerGone, runnerUnresponsive } from "./errors.ts";
import { KeepAlive } from "./keep-alive.ts";
import type { RunnerProcess, StartRunner } from "./types.ts";
import { watchRunner, type Watchdog } from "./watchdog.ts";
import type { Lease } from "./lease.ts";
import { FairQueue, type Turn } from "./fair-queue.ts";
import type { RunnerOptions } from "./runner-options.ts";
import type { SlotsView } from "./api.ts";
import { SessionSlots } from "./session-slots.ts";
import { listenForAbort } from "../runtime/abort-listener.ts";

export type { Lease, RunnerOptions };

// One llama-server for one (model, mode): its life as a state machine, its queue (fair across
// callers: see fair-queue.ts) and the leases it hands out, each on the slot session-slots.ts
// places it in. Only `enter` changes the state; callers read it and ask (`acquire`, `stop`), never set it.

export type RunnerState = "loading" | "ready" | "draining" | "stopping" | "stopped";

const NEXT: Record<RunnerState, RunnerState[]> = {
  loading: ["ready", "stopped"],
  ready: ["draining", "stopping", "stopped"],
  draining: ["stopping", "stopped"],
  stopping: ["stopped"],
  stopped: [],
};

export type RunnerEvents = {
  /** The runner has no request and none waiting (room for another load may come from it). */
  idle(runner: Runner): void;
  /** Idle for its keep-alive: the scheduler unloads it. */
  expired(runner: Runner): void;
  /** Stopped for good: load failure, crash, or stop. */
  gone(runner: Runner, crashed: boolean): void;
  /** It stopped answering and is being killed: new requests must go to a fresh runner at once. */
  unresponsive(runner: Runner, why: string): void;
  loaded(runner: Runner, ms: number): void;
  loadFailed(runner: Runner, error: unknown): void;
};

/** How long a runner may take to answer a scrape before it is left out. */
const SCRAPE_TIMEOUT_MS = 5_000;

type Waiter = { turn: Turn; grant(lease: Lease): void; fail(error: unknown): void };

export class Runner {
  readonly options: RunnerOptions;
  #state: RunnerState = "loading";
  #lastUsed = Date.now();
  #lastInteractive: number | undefined;
  readonly stopped: Promise<void>;
  private readonly events: RunnerEvents;
  // Granted again when the runner stops being shared: see fair-queue.ts.
  private readonly waiters = new FairQueue<Waiter>({ regrant: () => this.grantWaiters() });
  private readonly loadAbort = new AbortController();
  private process: RunnerProcess | undefined;
  private readonly death = new AbortController();
  private readonly slots: SessionSlots;
  private watchdog: Watchdog | undefined;
  readonly #keep: KeepAlive;
  private markStopped!: () => void;

  constructor(options: RunnerOptions, start: StartRunner, events: RunnerEvents) {
    this.options = options;
    this.events = events;
    this.#keep = new KeepAlive(options.keepAlive);
    this.stopped = new Promise((resolve) => (this.markStopped = resolve));
    this.slots = new SessionSlots(options.slots, options.ahead);
    void this.load(start);
  }

  get state(): RunnerState {
    return this.#state;
  }

  /** When its last request ended (at first, when it was created): the least recent idle runner goes first. */
  get lastUsed(): number {
    return this.#lastUsed;
  }

  /** When an interactive request last came or ended (batch work leaves the runner to its users a while). */
  get lastInteractive(): number | undefined {
    return this.#lastInteractive;
  }

  /** Requests holding a slot now. */
  get inUse(): number {
    return this.slots.inUse;
  }

  /** Its slots and the sessions it parked (see session-slots.ts). */
  get slotTable(): SlotsView {
    return this.slots.view();
  }

  /** How long it stays loaded once idle, as last asked for (see `keepFor`). */
  get keepAlive(): string {
    return this.#keep.text;
  }

  /** Sets how long the runner stays loaded once idle ("5m", "0", "-1"); applies from its next idle moment. */
  keepFor(keepAlive: string): void {
    this.#keep.set(keepAlive);
  }

  /** Requests at llama-server at once (see session-slots.ts). */
  private inFlightCap(lane: Turn["lane"] = "interactive"): number {
    return this.slots.inFlightCap(lane, this.waiters);
  }

  get waiting(): number {
    return this.waiters.length;
  }

  /** Loading, serving, or with requests queued: such a runner is never evicted. */
  get busy(): boolean {
    return this.state === "loading" || this.inUse > 0 || this.waiters.length > 0;
  }

  /** A slot, now or in the caller's turn; 503 at once when the queue is full. */
  acquire(signal?: AbortSignal, turn: Turn = { caller: "", lane: "interactive" }): Promise<Lease> {
    if (this.state === "stopping" || this.state === "stopped") return Promise.reject(new RunnerGone());
    signal?.throwIfAborted();
    this.waiters.note(turn.caller, turn.lane);
    this.slots.asked(turn);
    if (turn.lane === "interactive") this.#lastInteractive = Date.now();
    if (this.state === "ready" && this.waiters.takesNow(turn, this.inFlightCap(turn.lane) - this.inUse)) return Promise.resolve(this.lease(turn));
    if (this.inUse + this.waiters.length >= this.options.slots + this.options.queueDepth) return Promise.reject(queueFull(this.options.model));
    this.#keep.cancel();
    return new Promise<Lease>((resolve, reject) => {
      const onAbort = () => {
        remove();
        reject(signal!.reason);
        this.checkIdle();
      };
      const waiter: Waiter = {
        turn,
        grant: (lease) => (signal?.removeEventListener("abort", onAbort), resolve(lease)),
        fail: (error) => (signal?.removeEventListener("abort", onAbort), reject(error)),
      };
      if (signal) listenForAbort(signal, onAbort);
      const remove = this.waiters.push(waiter, turn);
      this.grantWaiters(); // a place kept for other callers may be this one's
    });
  }

  /** A GET on the runner outside any slot (its `/metrics`); undefined unless ready. */
  async scrape(path: string): Promise<string | undefined> {
    if (this.state !== "ready" || !this.process) return undefined;
    // The runner's fetch has no timeouts (generations take long): this one has, for a wedged runner.
    const response = await this.process.fetch(`http://runner${path}`, { signal: AbortSignal.timeout(SCRAPE_TIMEOUT_MS) });
    return response.ok ? await response.text() : undefined;
  }

  /** Finish what is served and queued, then stop (new requests go to a fresh runner). */
  drain(): void {
    if (this.state === "loading") return void this.stop();
    if (this.state !== "ready") return;
    this.enter("draining");
    this.checkIdle();
  }

  async stop(): Promise<void> {
    this.#keep.cancel();
    this.watchdog?.stop();
    if (this.state === "loading") this.loadAbort.abort(new Error("unloaded while loading"));
    else if (this.state === "ready" || this.state === "draining") {
      this.enter("stopping");
      this.failWaiters(new RunnerGone());
      await this.process!.stop(this.slots.held()).catch(() => {});
      // A runner's `exited` never settles after a stop we asked for: this is where it ends.
      if ((this.state as RunnerState) === "stopping") {
        this.enter("stopped");
        this.finish(false);
      }
    }
    await this.stopped;
  }

  private async load(start: StartRunner): Promise<void> {
    const began = Date.now();
    try {
      this.process = await start(this.options.spec, this.loadAbort.signal);
    } catch (error) {
      this.enter("stopped");
      if (!this.loadAbort.signal.aborted) this.events.loadFailed(this, error);
      this.failWaiters(this.loadAbort.signal.aborted ? new RunnerGone() : loadFailed(this.options.model, error, estimateNote(error, this.options.memory)));
      return this.finish(false);
    }
    if (this.loadAbort.signal.aborted) {
      await this.process.stop().catch(() => {});
      this.enter("stopped");
      this.failWaiters(new RunnerGone());
      return this.finish(false);
    }
    this.enter("ready");
    this.slots.loaded(this.process);
    if (this.options.watch) this.watchdog = watchRunner(this.process, this.options.watch, (why) => this.hung(why));
    this.events.loaded(this, Date.now() - began);
    void this.process.exited.then((reason) => {
      this.death.abort(reason);
      this.onExit();
    });
    this.grantWaiters();
    this.checkIdle();
  }

  /**
   * It stopped answering: the requests on it fail at once with a 502 (`died` aborts with it), those
   * queued for it go to a fresh runner, and the process is killed (SIGKILL: a stopped process would
   * not act on SIGTERM). Counted as a crash.
   */
  private hung(why: string): void {
    if (this.state !== "ready" && this.state !== "draining") return;
    this.enter("stopping");
    this.#keep.cancel();
    console.error(`runner ${this.options.spec.name} of model ${this.options.model} stopped answering (${why}): killed`);
    this.death.abort(runnerUnresponsive(this.options.model, why));
    this.failWaiters(new RunnerGone());
    this.events.unresponsive(this, why);
    void this.process!.kill().catch(() => {}).then(() => {
      this.enter("stopped");
      this.finish(true);
    });
  }

  /** The process ended without being asked to: a crash. */
  private onExit(): void {
    if (this.state !== "ready" && this.state !== "draining") return;
    this.enter("stopped");
    this.failWaiters(new RunnerGone());
    this.finish(true);
  }

  private finish(crashed: boolean): void {
    this.#keep.cancel();
    this.watchdog?.stop();
    this.markStopped();
    this.events.gone(this, crashed);
  }

  private lease(turn: Turn): Lease {
    const { caller, lane } = turn;
    const lease = this.slots.lease(turn, this.process!, this.death.signal, this.watchdog, () => {
      this.waiters.release(caller, lane);
      this.#lastUsed = Date.now();
      if (lane === "interactive") this.#lastInteractive = this.#lastUsed;
      this.grantWaiters();
      this.checkIdle();
    });
    this.#keep.cancel();
    return lease;
  }

  private grantWaiters(): void {
    while (this.state === "ready" || this.state === "draining") {
      const waiter = this.waiters.shift(this.inFlightCap(this.waiters.nextLane()) - this.inUse);
      if (!waiter) return;
      waiter.grant(this.lease(waiter.turn));
    }
  }

  private checkIdle(): void {
    if (this.busy || (this.state !== "ready" && this.state !== "draining")) return;
    if (this.state === "draining") return void this.stop();
    this.events.idle(this);
    this.#keep.arm(() => this.events.expired(this));
  }

  private failWaiters(error: unknown): void {
    for (const waiter of this.waiters.clear()) waiter.fail(error);
  }

  private enter(next: RunnerState): void {
    if (!NEXT[this.state].includes(next)) throw new Error(`runner ${this.options.key}: ${this.state} -> ${next}`);
    this.#state = next;
  }
}

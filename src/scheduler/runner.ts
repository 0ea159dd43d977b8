import { loadFailed, queueFull, RunnerGone, runnerUnresponsive } from "./errors.ts";
import { keepAliveMs } from "./policy.ts";
import type { RunnerProcess, StartRunner } from "./types.ts";
import { formatSize } from "../models/gguf.ts";
import { watchRunner, type Watchdog } from "./watchdog.ts";
import { createLease, type Lease, type LeaseSlot } from "./lease.ts";
import { FairQueue, SHARED_WINDOW_MS, type Turn } from "./fair-queue.ts";
import type { RunnerOptions } from "./runner-options.ts";
import { SlotTable, type Placement } from "./affinity.ts";
import { PrefixCopies } from "./prefix-copies.ts";

export type { Lease, RunnerOptions };

// One llama-server for one (model, mode): its life as a state machine, its slots, its queue (fair
// across callers: see fair-queue.ts) and the leases it hands out. Only `enter` changes the state;
// callers read it and ask (`acquire`, `stop`), never set it.

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
  /** When a request of an agent session last came (see inFlightCap). */
  #sessionAt: number | undefined;
  #inUse = 0;
  readonly stopped: Promise<void>;
  private readonly events: RunnerEvents;
  // Granted again when the runner stops being shared: see fair-queue.ts.
  private readonly waiters = new FairQueue<Waiter>({ regrant: () => this.grantWaiters() });
  private readonly loadAbort = new AbortController();
  private process: RunnerProcess | undefined;
  private readonly death = new AbortController();
  private keepAliveTimer: ReturnType<typeof setTimeout> | undefined;
  /** Which slot each agent session's requests go to (see affinity.ts); made with the process. */
  private slotTable: SlotTable;
  private copies: PrefixCopies | undefined;
  private watchdog: Watchdog | undefined;
  #keepAlive: { text: string; ms: number };
  private markStopped!: () => void;

  constructor(options: RunnerOptions, start: StartRunner, events: RunnerEvents) {
    this.options = options;
    this.events = events;
    this.#keepAlive = { text: options.keepAlive, ms: keepAliveMs(options.keepAlive) };
    this.stopped = new Promise((resolve) => (this.markStopped = resolve));
    this.slotTable = new SlotTable(options.slots);
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
    return this.#inUse;
  }

  /** How long it stays loaded once idle, as last asked for (see `keepFor`). */
  get keepAlive(): string {
    return this.#keepAlive.text;
  }

  /** Sets how long the runner stays loaded once idle ("5m", "0", "-1"); applies from its next idle moment. */
  keepFor(keepAlive: string): void {
    if (keepAlive === this.#keepAlive.text) return;
    this.#keepAlive = { text: keepAlive, ms: keepAliveMs(keepAlive) };
  }

  /**
   * Requests at llama-server at once: its slots, and those in its own queue (FIFO: see fair-queue.ts).
   * None is queued there while agent sessions use the runner: a request in its queue takes the
   * first slot that is idle there, and a slot the table gave a follower (see affinity.ts) is idle
   * until the follower's copy is restored: taken meanwhile, the start is processed once more.
   */
  private inFlightCap(lane: Turn["lane"] = "interactive"): number {
    const queued = lane === "batch" || this.waiters.shared() || this.sessionsRecently() ? 0 : (this.options.ahead ?? 0);
    return this.options.slots + queued;
  }

  /** Whether a request of an agent session came within SHARED_WINDOW_MS, or one is placed on a slot now (a prompt may take longer). */
  private sessionsRecently(): boolean {
    return this.slotTable.view().some((s) => s.busy) || (this.#sessionAt !== undefined && Date.now() - this.#sessionAt < SHARED_WINDOW_MS);
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
    if (turn.session !== undefined && turn.placed !== false) this.#sessionAt = Date.now();
    if (turn.lane === "interactive") this.#lastInteractive = Date.now();
    if (this.state === "ready" && this.waiters.takesNow(turn, this.inFlightCap(turn.lane) - this.inUse)) return Promise.resolve(this.lease(turn));
    if (this.inUse + this.waiters.length >= this.options.slots + this.options.queueDepth) return Promise.reject(queueFull(this.options.model));
    this.cancelKeepAlive();
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
      signal?.addEventListener("abort", onAbort, { once: true });
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
    this.cancelKeepAlive();
    this.watchdog?.stop();
    if (this.state === "loading") this.loadAbort.abort(new Error("unloaded while loading"));
    else if (this.state === "ready" || this.state === "draining") {
      this.enter("stopping");
      this.failWaiters(new RunnerGone());
      await this.process!.stop().catch(() => {});
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
      this.failWaiters(this.loadAbort.signal.aborted ? new RunnerGone() : loadFailed(this.options.model, error, this.estimateNote(error)));
      return this.finish(false);
    }
    if (this.loadAbort.signal.aborted) {
      await this.process.stop().catch(() => {});
      this.enter("stopped");
      this.failWaiters(new RunnerGone());
      return this.finish(false);
    }
    this.enter("ready");
    const process = this.process;
    this.copies = new PrefixCopies(process.copySlot && ((from) => process.copySlot!(from)), process.parking);
    if (this.options.watch) this.watchdog = watchRunner(this.process, this.options.watch, (why) => this.hung(why));
    this.events.loaded(this, Date.now() - began);
    void this.process.exited.then((reason) => {
      this.death.abort(reason);
      this.onExit();
    });
    this.grantWaiters();
    this.checkIdle();
  }

  /** Beside an out-of-memory at load, what we had estimated it needs. */
  private estimateNote(error: unknown): string | undefined {
    const memory = this.options.memory;
    if ((error as { code?: unknown } | undefined)?.code !== "out_of_memory" || !memory) return undefined;
    return `its estimate was ${formatSize(memory.total)} of ${memory.where === "gpu" ? "GPU memory" : "memory"}`;
  }

  /**
   * It stopped answering: the requests on it fail at once with a 502 (`died` aborts with it), those
   * queued for it go to a fresh runner, and the process is killed (SIGKILL: a stopped process would
   * not act on SIGTERM). Counted as a crash.
   */
  private hung(why: string): void {
    if (this.state !== "ready" && this.state !== "draining") return;
    this.enter("stopping");
    this.cancelKeepAlive();
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
    this.cancelKeepAlive();
    this.watchdog?.stop();
    this.markStopped();
    this.events.gone(this, crashed);
  }

  private lease(turn: Turn): Lease {
    const { caller, lane } = turn;
    const where = this.place(turn);
    this.#inUse++;
    this.cancelKeepAlive();
    return createLease(this.process!, this.death.signal, this.watchdog, () => {
      this.#inUse--;
      this.slotTable.release(where, Date.now());
      if (where.kind === "take" && where.lead) this.copies?.ended(where.slot);
      this.waiters.release(caller, lane);
      this.#lastUsed = Date.now();
      if (lane === "interactive") this.#lastInteractive = this.#lastUsed;
      this.grantWaiters();
      this.checkIdle();
    }, this.leaseSlot(where));
  }

  /**
   * The slot a granted request goes to: a session's request within the slots (one handed to
   * llama-server's own queue beyond them finds no slot free, and is left to it), by the table.
   * Sessions are named per caller: one key never lands on another's slot by naming its session.
   */
  private place({ caller, session, prefix, placed }: Turn): Placement {
    if (session === undefined || placed === false || this.#inUse >= this.options.slots) return { kind: "any" };
    const group = prefix === undefined ? undefined : `${caller}\u0000${prefix}`;
    return this.slotTable.place({ session: `${caller}\u0000${session}`, prefix, group }, Date.now());
  }

  private leaseSlot(where: Placement): LeaseSlot {
    if (where.kind === "any") return {};
    if (where.kind === "take" && where.lead) this.copies?.lead(where.slot);
    return this.copies?.prepare(where) ?? { slot: where.slot };
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
    const ms = this.#keepAlive.ms;
    if (ms === 0) this.events.expired(this);
    else if (Number.isFinite(ms)) this.keepAliveTimer = setTimeout(() => this.events.expired(this), ms);
  }

  private cancelKeepAlive(): void {
    clearTimeout(this.keepAliveTimer);
    this.keepAliveTimer = undefined;
  }

  private failWaiters(error: unknown): void {
    for (const waiter of this.waiters.clear()) waiter.fail(error);
  }

  private enter(next: RunnerState): void {
    if (!NEXT[this.state].includes(next)) throw new Error(`runner ${this.options.key}: ${this.state} -> ${next}`);
    this.#state = next;
  }
}

import { rmSync } from "node:fs";
import { removeSocket } from "../src/runtime/socket-file.ts";
import type { ChildProcess } from "../src/runtime/types.ts";
import { isRunning } from "./alive.ts";
import { explainExit, SidecarError } from "./errors.ts";
import { pollUntilHealthy } from "./health.ts";
import { pump, type RunnerOutput } from "./output.ts";

// One llama-server process, one-shot: it is started, becomes ready, and ends once, by stop() or
// on its own. It never restarts itself; whoever owns it (the scheduler) decides what comes next.

export type SidecarState = "starting" | "ready" | "stopping" | "stopped" | "failed";

export interface Sidecar {
  readonly name: string;
  readonly pid: number;
  readonly socketPath: string;
  /** A fetch whose requests all go to this runner's socket: `sidecar.fetch("http://runner/v1/models")`. */
  readonly fetch: typeof fetch;
  readonly state: SidecarState;
  /**
   * Resolves with the reason when the process ends on its own (crash, kill, fatal error), with
   * its last output turned into one clear line. Never settles after a stop() we asked for.
   */
  readonly exited: Promise<Error>;
  /** Whether the process runs at this moment (asked of the OS, so a death shows before `exited` settles). */
  running(): boolean;
  /** SIGTERM, then SIGKILL after the grace period; resolves once the process and its files are gone. */
  stop(): Promise<void>;
  /**
   * SIGKILL at once, for a runner that stopped answering (a stopped process would not act on
   * SIGTERM until it runs again); like stop(), `exited` does not settle after it.
   */
  kill(): Promise<void>;
  /** The last few KiB of the runner's output. */
  logTail(): string;
  readonly logPath: string;
}

export interface SidecarParts {
  name: string;
  child: ChildProcess;
  socketPath: string;
  pidFile: string;
  output: RunnerOutput;
  fetch: typeof fetch;
  stopGraceMs: number;
}

const NEXT: Record<SidecarState, readonly SidecarState[]> = {
  starting: ["ready", "stopping", "failed"],
  ready: ["stopping", "failed"],
  stopping: ["stopped"],
  stopped: [],
  failed: [],
};

// Output still in the pipes when the process ends is read for at most this long.
const DRAIN_MS = 1_000;

export class SidecarProcess implements Sidecar {
  readonly name: string;
  readonly pid: number;
  readonly socketPath: string;
  readonly fetch: typeof fetch;
  readonly exited: Promise<Error>;
  readonly #parts: SidecarParts;
  /** Settles once the process is gone and its files removed: with the error if it ended on its own. */
  readonly #gone: Promise<SidecarError | undefined>;
  #state: SidecarState = "starting";
  #stopping: Promise<void> | undefined;
  #exitSeen = false;

  constructor(parts: SidecarParts) {
    this.#parts = parts;
    this.name = parts.name;
    this.pid = parts.child.pid;
    this.socketPath = parts.socketPath;
    this.fetch = parts.fetch;
    this.#gone = this.#watch();
    this.exited = this.#gone.then((error) => error ?? new Promise<Error>(() => {}));
  }

  get state(): SidecarState {
    return this.#state;
  }

  get logPath(): string {
    return this.#parts.output.path;
  }

  logTail(): string {
    return this.#parts.output.tail();
  }

  running(): boolean {
    return !this.#exitSeen && isRunning(this.pid);
  }

  /** The only place the state changes. */
  #transition(to: SidecarState): void {
    if (!NEXT[this.#state].includes(to)) throw new Error(`runner ${this.name}: ${this.#state} -> ${to}`);
    this.#state = to;
  }

  async #watch(): Promise<SidecarError | undefined> {
    const { child, output } = this.#parts;
    const drained = Promise.all([pump(child.stdout, output), pump(child.stderr, output)]);
    const exit = await child.exited;
    this.#exitSeen = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([drained, new Promise((resolve) => (timer = setTimeout(resolve, DRAIN_MS)))]);
    clearTimeout(timer);
    output.write(`--- exited: ${exit.signal ?? `code ${exit.code}`}\n`);
    output.close();
    removeSocket(this.socketPath);
    rmSync(this.#parts.pidFile, { force: true });
    if (this.#state === "stopping") {
      this.#transition("stopped");
      return undefined;
    }
    this.#transition("failed");
    return explainExit(exit, output.tail());
  }

  /**
   * Waits until llama-server answers /health with 200. Rejects with the process's own error if it
   * exits first; stops it and rejects if `timeoutMs` passes or `signal` aborts first.
   */
  async untilReady(timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const ended = new AbortController();
    void this.#gone.then(() => ended.abort());
    const deadline = AbortSignal.timeout(timeoutMs);
    const giveUp = AbortSignal.any([ended.signal, deadline, ...(signal ? [signal] : [])]);
    const healthy = await pollUntilHealthy(this.fetch, giveUp);
    if (healthy && this.#state === "starting") return this.#transition("ready");
    if (!ended.signal.aborted) await this.stop();
    const error = await this.#gone;
    if (error) throw error;
    const code = deadline.aborted ? "ready_timeout" : "aborted";
    const why = deadline.aborted ? `did not become ready within ${timeoutMs} ms` : "was stopped while starting";
    throw new SidecarError(code, `llama-server for ${this.name} ${why}`, this.logTail());
  }

  stop(): Promise<void> {
    this.#stopping ??= this.#stop(this.#parts.stopGraceMs);
    return this.#stopping;
  }

  kill(): Promise<void> {
    // A stop already under way is hurried: its SIGKILL comes now rather than after the grace.
    if (this.#stopping && this.#state === "stopping") this.#parts.child.kill("SIGKILL");
    this.#stopping ??= this.#stop(0);
    return this.#stopping;
  }

  async #stop(graceMs: number): Promise<void> {
    if (this.#state === "stopped" || this.#state === "failed") return;
    this.#transition("stopping");
    const { child } = this.#parts;
    child.kill(graceMs > 0 ? "SIGTERM" : "SIGKILL");
    const timer = graceMs > 0 ? setTimeout(() => child.kill("SIGKILL"), graceMs) : undefined;
    await this.#gone;
    clearTimeout(timer);
  }
}

// Telling a runner that hangs from one that is busy. A llama-server can stay alive and stop
// answering (a stopped or swapped-out process, a driver hang, a deadlock); its requests would then
// never end, nor would any later request for its model. Two signs:
// - /health is answered by llama-server's HTTP threads, apart from its generation loop: when it is
//   not answered in time, idle or busy, the process itself is stuck.
// - A streamed generation sends a chunk per token: when nothing at all comes from the runner for
//   the stall limit while it streams, its generation loop is stuck. A prompt being processed sends
//   nothing (one batch may hold up every slot for many seconds on a CPU), so while any request has
//   not had the first byte of its body the longer prompt limit applies (a streamed answer's headers
//   come at once, before its prompt is processed: they are a sign of life, not an answer). A whole (not streamed) answer sends
//   nothing until it is done: requests of that kind alone are left to /health and to the request
//   time limit. SSE pings (comment lines, which llama-server's HTTP thread writes while the
//   generation is silent) are not signs of life.

import type { RunnerProcess } from "./types.ts";

export type WatchLimits = {
  /** How long /health may take to answer; it is asked at least once every such period. */
  healthTimeoutMs: number;
  /** While every request has had its first byte, the longest a streaming runner may send nothing. */
  stallMs: number;
  /** While a request waits for its first byte (its prompt is processed, or it is queued there). */
  promptStallMs: number;
};

/** One request handed to the runner, as the watchdog follows it. */
export interface Watched {
  /**
   * Bytes came from the runner for it: a chunk of its body, or (none given) its answer's headers,
   * which count as life but leave it waiting for its first token.
   */
  heard(chunk?: Uint8Array): void;
  end(): void;
}

type Request = { stream: boolean; answered: boolean };

export class Watchdog {
  private readonly requests = new Set<Request>();
  private lastHeard = Date.now();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  private probing = false;
  private readonly limits: WatchLimits;
  private readonly probe: (signal: AbortSignal) => Promise<unknown>;
  private readonly hung: (why: string) => void;

  /** `probe` asks /health and rejects when its signal aborts first; `hung` is told once, why. */
  constructor(limits: WatchLimits, probe: (signal: AbortSignal) => Promise<unknown>, hung: (why: string) => void) {
    this.limits = limits;
    this.probe = probe;
    this.hung = hung;
  }

  start(): void {
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** A request is sent to the runner: the limits run from now. */
  track(stream: boolean): Watched {
    const request: Request = { stream, answered: false };
    this.requests.add(request);
    this.lastHeard = Date.now();
    return {
      heard: (chunk) => {
        if (chunk && onlyComments(chunk)) return;
        if (chunk) request.answered = true;
        this.lastHeard = Date.now();
      },
      end: () => void this.requests.delete(request),
    };
  }

  /** Why the runner counts as stuck in its generation, or undefined. */
  private stall(now: number): string | undefined {
    let streaming = false;
    let waiting = false;
    for (const request of this.requests) {
      streaming ||= request.stream;
      waiting ||= !request.answered;
    }
    if (!streaming) return undefined;
    const limit = waiting ? this.limits.promptStallMs : this.limits.stallMs;
    const quiet = now - this.lastHeard;
    if (quiet <= limit) return undefined;
    return `it sent nothing for ${quiet} ms ${waiting ? "while a prompt was processed" : "during a generation"}`;
  }

  /** Looked at as often as the shorter of the health and stall limits. */
  private schedule(): void {
    if (!this.stopped) this.timer = setTimeout(() => this.check(), Math.min(this.limits.healthTimeoutMs, this.limits.stallMs));
  }

  private check(): void {
    const stall = this.stall(Date.now());
    if (stall) return this.giveUp(stall);
    if (!this.probing) void this.askHealth();
    this.schedule();
  }

  private async askHealth(): Promise<void> {
    this.probing = true;
    const deadline = AbortSignal.timeout(this.limits.healthTimeoutMs);
    try {
      await this.probe(deadline);
    } catch {
      // Refused or reset: the process is ending, and its exit says why. Only silence is a hang.
      if (deadline.aborted) this.giveUp(`its /health did not answer within ${this.limits.healthTimeoutMs} ms`);
    } finally {
      this.probing = false;
    }
  }

  private giveUp(why: string): void {
    if (this.stopped) return;
    this.stop();
    this.hung(why);
  }
}

/** Starts watching a runner's process; `hung` is told once, why. */
export function watchRunner(process: RunnerProcess, limits: WatchLimits, hung: (why: string) => void): Watchdog {
  // `connection: close`: llama-server gives each open connection an HTTP thread of its own.
  const probe = async (signal: AbortSignal) => (await process.fetch("http://runner/health", { signal, headers: { connection: "close" } })).body?.cancel();
  const watchdog = new Watchdog(limits, probe, hung);
  watchdog.start();
  return watchdog;
}

const COLON = 58;
const decoder = new TextDecoder();

/** A chunk made only of SSE comment lines (`:` pings) and blank lines. */
function onlyComments(chunk: Uint8Array): boolean {
  if (chunk[0] !== COLON) return false;
  return /^(?::[^\n]*\n|\n)*$/.test(decoder.decode(chunk));
}

import type { Mode, RunnerSpec } from "./types.ts";
import type { Estimate } from "./memory/estimate.ts";
import type { WatchLimits } from "./watchdog.ts";

// What a runner is launched with: the launch plan decides it (launch-plan.ts), the runner lives by
// it (runner.ts), the views show it.

export type RunnerOptions = {
  key: string;
  modelId: string;
  /** The name people know it by, for messages and listings. */
  model: string;
  mode: Mode;
  spec: RunnerSpec;
  slots: number;
  /** Requests handed to llama-server beyond its slots, to wait in its queue (part of `queueDepth`). */
  ahead?: number;
  queueDepth: number;
  /** As configured ("5m", "0", "-1"); a request may ask for another (see `keepFor`). */
  keepAlive: string;
  /** llama-server's compute threads, and whether they were set (else a share of the cores). */
  threads: number;
  threadsFixed: boolean;
  /** Its estimated memory and where it lives, when the scheduler keeps a budget. */
  memory?: Estimate & { where: "gpu" | "cpu" };
  /** The context a request asked for when it launched this runner (before it was bounded). */
  requestedContext?: number;
  /** How a hung runner is told from a busy one (see watchdog.ts); none: it is not watched. */
  watch?: WatchLimits;
};

// What the scheduler needs from the world: a way to start one llama-server runner (the sidecar's
// supervisor), and the models it runs. Process and model are structural types, so that the
// scheduler's unit tests can hand it small fakes.

import type { EngineBuild, RunnerMode, RunnerSpec } from "../../sidecar/index.ts";

export type { EngineBuild, RunnerSpec };
export type Mode = RunnerMode;

/** One running llama-server: one-shot, it never restarts itself (the scheduler does). */
export interface RunnerProcess {
  /** fetch against the runner's socket: the URL's host is ignored, its path is the runner's. */
  fetch: typeof fetch;
  /** Settles with the reason when the process ends on its own (never after a stop we asked for). */
  exited: Promise<Error>;
  /** Whether the process runs at this moment (a death shows here before `exited` settles). */
  running(): boolean;
  /**
   * Ends the process. `held`: slot -> the agent session whose conversation it holds (see
   * affinity.ts), which a runner that parks saves as that session's parked conversation.
   */
  stop(held?: ReadonlyMap<number, string>): Promise<void>;
  /** SIGKILL now: for a runner that stopped answering. Like `stop`, `exited` does not settle after it. */
  kill(): Promise<void>;
  /** Saves one slot for others to restore (see prefix-copies.ts); absent where slots cannot be saved. */
  copySlot?(from: number): Promise<SlotCopy | undefined>;
  /** Saves and restores sessions' conversations displaced from their slots (see affinity.ts); absent where parking is off. */
  parking?: SlotParking;
}

/** Conversations parked by session name (per key: a name is never another key's). */
export interface SlotParking {
  /**
   * Whether `session`'s conversation is parked where this runner finds it, by a runner of the same
   * model, build and settings: this one, one before it loaded, or another process on the same store.
   */
  keeps(session: string): boolean;
  /** Saves `slot`'s conversation as `session`'s (false: not saved, or not by the time `signal` aborts). */
  park(slot: number, session: string, signal?: AbortSignal): Promise<boolean>;
  /** Restores `session`'s parked conversation into `slot`, and removes it (false: none, or refused). */
  unpark(session: string, slot: number): Promise<boolean>;
}

/** One slot's saved state: restored into other slots, then dropped. */
export interface SlotCopy {
  /** Puts the saved state into `slot` (false: llama-server refused; the slot is then empty). */
  restore(slot: number): Promise<boolean>;
  drop(): Promise<void>;
}

/** Starts a runner and resolves once it answers `/health`; rejects with the runner's error. */
export type StartRunner = (spec: RunnerSpec, signal?: AbortSignal) => Promise<RunnerProcess>;

/** The part of a stored model the scheduler uses; `config.gguf` is its GGUF header, values as text. */
export type ModelRef = {
  id: string;
  tags: string[];
  ggufPath: string;
  /** Weights split in several GGUF files: the others, in order. */
  shardPaths?: string[];
  mmprojPath?: string;
  /** `size`: the weight files' total as shown (`256.35MiB`). */
  config?: { architecture?: string; size?: string; gguf?: Record<string, string> };
};

export const modelName = (model: ModelRef): string => model.tags[0] ?? model.id;

/** What one request asks of its runner beyond the model's settings. */
export type RunnerWish = {
  /**
   * How long the runner then stays loaded once idle (as Ollama's per-request keep_alive: until the
   * next request, which without one brings back the configured keep-alive).
   */
  keepAlive?: string;
  /**
   * A context size for this runner only (Ollama's `num_ctx`), bounded by what fits; the saved
   * settings stay as they are. A loaded runner with another context is replaced once its requests
   * end; a request without a wish takes the runner loaded, whatever its context.
   */
  contextSize?: number;
  /** Whom it is for (a key's name): waiting requests are served in turn across callers. */
  caller?: string;
  /** `batch`: served only when no interactive request waits, and never queued at llama-server. */
  lane?: Lane;
  /** The agent session it belongs to (src/inference/session.ts): placed on its slot (see affinity.ts). */
  session?: string | undefined;
  /** The digest of its prompt's start (system prompt and tools), shared by sessions of one agent. */
  prefix?: string | undefined;
  /** Naming no session: the digest of its conversation's opening (its start and first message), which finds its slot again. */
  opening?: string | undefined;
};

export type Lane = "interactive" | "batch";

// What the scheduler needs from the world: a way to start one llama-server runner (the sidecar's
// supervisor), and the models it runs. Structural types, so the scheduler and its tests depend on
// the shape, not on the sidecar's or the store's modules.

export type Mode = "completion" | "embedding";

export const MODES: readonly Mode[] = ["completion", "embedding"];

/** How one runner is started: what the sidecar turns into llama-server's argv. */
export type RunnerSpec = {
  name: string;
  modelPath: string;
  mode: Mode;
  contextSize?: number;
  parallel?: number;
  gpuLayers?: number | "auto" | "all";
  extraArgs?: string[];
};

/** One running llama-server: one-shot, it never restarts itself (the scheduler does). */
export interface RunnerProcess {
  /** fetch against the runner's socket: the URL's host is ignored, its path is the runner's. */
  fetch: typeof fetch;
  /** Settles (never rejects) when the process ends, with the reason. */
  exited: Promise<Error>;
  stop(): Promise<void>;
  logTail?(): string;
}

/** Starts a runner and resolves once it answers `/health`; rejects with the runner's error. */
export type StartRunner = (spec: RunnerSpec, signal?: AbortSignal) => Promise<RunnerProcess>;

/** The part of a stored model the scheduler uses. */
export type ModelRef = { id: string; tags: string[]; ggufPath: string };

export const modelName = (model: ModelRef): string => model.tags[0] ?? model.id;

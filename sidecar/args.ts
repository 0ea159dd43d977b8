import type { PoolingType, RunnerMode, RunnerSpec } from "./spec.ts";

// llama-server's command line, in two pure steps, both table-tested: what a runner starts with (a
// spec, from the model and the settings the scheduler chose), and the argv for that spec.

/** The settings that become llama-server flags (the draft's path is ours, from the store). */
export type LaunchSettings = {
  contextSize?: number;
  reasoningBudget?: number;
  speculative?: { draftPath: string; numTokens?: number; minAcceptanceRate?: number };
  /** The model's own flags, already checked against the allow-list: appended last, so they win. */
  runtimeFlags?: string[];
};

/** What the scheduler decided for one launch. */
export type Launch = {
  slots: number;
  threads: number;
  /** Requests held in llama-server's own queue beyond its slots. */
  ahead?: number;
  gpuLayers?: string;
  /** The context chosen for it; default: the configured one. */
  contextSize?: number;
  pooling?: PoolingType;
  /** The model's name in answers. */
  alias: string;
  /** llama-server's host prompt cache (bytes, passed in whole MiB; 0: off) and checkpoints per slot. */
  promptCache?: { bytes: number; checkpoints: number };
};

/** What the sidecar starts for a model in a mode with its settings; `serial` tells runners of one model apart. */
export function runnerSpec(
  model: { id: string; ggufPath: string; shardPaths?: string[]; mmprojPath?: string },
  mode: RunnerMode,
  settings: LaunchSettings,
  { slots, threads, ahead = 0, gpuLayers, contextSize, pooling, alias, promptCache }: Launch,
  serial: number,
): RunnerSpec {
  return {
    // Names the runner's socket and log: unique, even while a reloaded runner still drains.
    name: `${model.id.replace(/^sha256:/, "").slice(0, 12)}-${mode}-${serial}`,
    // Answers name the model as people know it, not the runner (which changes on every reload).
    alias,
    modelPath: model.ggufPath,
    ...(model.shardPaths ? { modelShards: model.shardPaths } : {}),
    ...(model.mmprojPath ? { mmprojPath: model.mmprojPath } : {}),
    mode,
    contextSize: contextSize ?? settings.contextSize,
    parallel: slots,
    ...(gpuLayers ? { gpuLayers } : {}),
    ...(pooling ? { pooling } : {}),
    // llama-server serves each keep-alive connection on one HTTP thread until it closes: with
    // fewer threads than our open connections (a slot each, plus metrics), a request would wait
    // for another connection's keep-alive to time out. The model's own flags come after and win.
    // Compute threads: the runner's share of the cores (batch threads follow: same as --threads).
    extraArgs: [
      "--threads",
      String(threads),
      "--threads-http",
      String(slots + ahead + HTTP_THREADS_SPARE),
      ...cacheFlags(promptCache),
      ...settingFlags(settings),
      ...(settings.runtimeFlags ?? []),
    ],
  };
}

/**
 * The host prompt cache's bound and the checkpoints per slot: llama-server's own defaults (8 GiB,
 * 32) are far beyond what the scheduler's estimate counts. Neither flag is a model's own to set.
 */
function cacheFlags(cache: Launch["promptCache"]): string[] {
  if (!cache) return [];
  return ["--cache-ram", String(Math.ceil(cache.bytes / MIB)), "--ctx-checkpoints", String(cache.checkpoints)];
}

const MIB = 1024 * 1024;

/** llama-server flags for the settings that have their own fields. */
function settingFlags({ reasoningBudget, speculative }: LaunchSettings): string[] {
  const flags: string[] = [];
  if (reasoningBudget !== undefined) flags.push("--reasoning-budget", String(reasoningBudget));
  if (speculative) {
    flags.push("--model-draft", speculative.draftPath);
    if (speculative.numTokens !== undefined) flags.push("--spec-draft-n-max", String(speculative.numTokens));
    if (speculative.minAcceptanceRate !== undefined) flags.push("--spec-draft-p-min", String(speculative.minAcceptanceRate));
  }
  return flags;
}

/** HTTP threads beyond one per slot: metrics scrapes, and connections still closing. */
const HTTP_THREADS_SPARE = 8;

/**
 * The llama-server command line for a runner listening on `socketPath`.
 * `--port` is passed although a Unix socket ignores it, because its default differs across releases.
 */
export function buildLlamaServerArgs(spec: RunnerSpec, socketPath: string): string[] {
  const args = ["--model", spec.modelPath, "--alias", spec.alias ?? spec.name, "--host", socketPath, "--port", "0"];
  if (spec.mmprojPath !== undefined) args.push("--mmproj", spec.mmprojPath);
  args.push("--metrics", "--jinja", "--no-webui");
  if (spec.contextSize !== undefined) args.push("--ctx-size", String(spec.contextSize));
  if (spec.parallel !== undefined) args.push("--parallel", String(spec.parallel));
  if (spec.gpuLayers !== undefined) args.push("--n-gpu-layers", spec.gpuLayers);
  if (spec.mode === "embedding") {
    args.push("--embeddings");
    if (spec.pooling !== undefined) args.push("--pooling", spec.pooling);
  }
  // Embeddings with rank pooling; the model's classifier head gives the score.
  if (spec.mode === "reranking") args.push("--rerank");
  return [...args, ...(spec.extraArgs ?? [])];
}

import * as z from "zod";

// What one runner is: one llama-server process serving one model file in one mode.

/** DMR's modes: chat and completions, embeddings, and reranking (`--rerank`: rank pooling). */
export type RunnerMode = "completion" | "embedding" | "reranking";
export type PoolingType = "mean" | "cls" | "last" | "rank";

export interface RunnerSpec {
  /** Names the runner's socket, pid and log files: letters, digits, `.`, `_`, `-`. */
  name: string;
  /** The model's name in answers (llama-server's `--alias`); default: `name`. */
  alias?: string;
  modelPath: string;
  /**
   * Weights split in several GGUF files: the files after `modelPath`, in order. They need not be
   * named as llama.cpp finds them: the runner gets links that are (see shards.ts).
   */
  modelShards?: string[];
  /** The model's multimodal projector, if it has one: without it image input is refused. */
  mmprojPath?: string;
  mode: RunnerMode;
  /** Context size in tokens; 0 = the model's own. Default: llama-server's (the model's own). */
  contextSize?: number;
  /** Parallel slots (llama-server `--parallel`). */
  parallel?: number;
  /** Layers on the GPU: a count, `auto` or `all`. */
  gpuLayers?: string;
  /** Embedding pooling; default: the one the model file declares. */
  pooling?: PoolingType;
  /** Further llama-server flags, appended last (so they win). */
  extraArgs?: string[];
  /** The llama.cpp build to run; default: the one the supervisor was given. */
  engine?: EngineBuild;
}

/** One llama.cpp build: where its llama-server is, and what it says of itself. */
export interface EngineBuild {
  /** How people name it: `builtin`, or the tag it was pulled under. */
  name: string;
  path: string;
  /** As `--version` reports it. */
  version: string;
  /** Its content digest, for a build pulled from a registry. */
  digest?: string;
  /** The flags its `--help` lists: when known, the argv is spelled in them (see flag-names.ts). */
  flags?: string[];
  /** Folders of its shared libraries besides the binary's own. */
  libraryDirs?: string[];
}

export const engineBuildSchema = z.object({
  name: z.string().min(1),
  path: z.string().min(1),
  version: z.string().min(1),
  digest: z.string().optional(),
  flags: z.array(z.string()).optional(),
  libraryDirs: z.array(z.string()).optional(),
}) satisfies z.ZodType<EngineBuild>;

export const runnerSpecSchema = z.object({
  name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, "letters, digits, '.', '_', '-' (at most 64)"),
  alias: z.string().min(1).optional(),
  modelPath: z.string().min(1),
  modelShards: z.array(z.string().min(1)).max(99_998).optional(),
  mmprojPath: z.string().min(1).optional(),
  mode: z.enum(["completion", "embedding", "reranking"]),
  contextSize: z.int().min(0).optional(),
  parallel: z.int().min(1).optional(),
  gpuLayers: z.string().regex(/^(\d+|auto|all)$/, "a layer count, 'auto' or 'all'").optional(),
  pooling: z.enum(["mean", "cls", "last", "rank"]).optional(),
  extraArgs: z.array(z.string()).optional(),
  engine: z.lazy(() => engineBuildSchema).optional(),
}) satisfies z.ZodType<RunnerSpec>;

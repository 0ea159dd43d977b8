import type { RunnerSpec } from "./spec.ts";

/**
 * The llama-server command line for a runner listening on `socketPath`. Pure: table-tested.
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

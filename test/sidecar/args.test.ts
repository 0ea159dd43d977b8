import { describe, expect, it } from "vitest";
import { buildLlamaServerArgs } from "../../sidecar/args.ts";
import type { RunnerSpec } from "../../sidecar/spec.ts";

const SOCK = "/run/llamadock/m.sock";
const BASE = ["--model", "/models/m.gguf", "--alias", "m", "--host", SOCK, "--port", "0", "--metrics", "--jinja", "--no-webui"];
const spec = (extra: Partial<RunnerSpec> = {}): RunnerSpec => ({ name: "m", modelPath: "/models/m.gguf", mode: "completion", ...extra });

const cases: Array<[string, RunnerSpec, string[]]> = [
  ["completion, defaults only", spec(), BASE],
  ["context size", spec({ contextSize: 4096 }), [...BASE, "--ctx-size", "4096"]],
  ["context size 0 (the model's own) is passed, not dropped", spec({ contextSize: 0 }), [...BASE, "--ctx-size", "0"]],
  ["multimodal projector", spec({ mmprojPath: "/models/p.gguf" }), [...BASE.slice(0, 8), "--mmproj", "/models/p.gguf", ...BASE.slice(8)]],
  ["parallel slots", spec({ parallel: 4 }), [...BASE, "--parallel", "4"]],
  ["gpu layers: count", spec({ gpuLayers: "33" }), [...BASE, "--n-gpu-layers", "33"]],
  ["gpu layers: all", spec({ gpuLayers: "all" }), [...BASE, "--n-gpu-layers", "all"]],
  ["embedding: model's own pooling", spec({ mode: "embedding" }), [...BASE, "--embeddings"]],
  ["embedding: chosen pooling", spec({ mode: "embedding", pooling: "cls" }), [...BASE, "--embeddings", "--pooling", "cls"]],
  ["pooling ignored for completion", spec({ pooling: "mean" }), BASE],
  ["reranking: rank pooling by --rerank, no --pooling", spec({ mode: "reranking", pooling: "mean" }), [...BASE, "--rerank"]],
  ["extra args come last", spec({ contextSize: 8, extraArgs: ["--ctx-size", "16", "--threads", "2"] }), [...BASE, "--ctx-size", "8", "--ctx-size", "16", "--threads", "2"]],
  [
    "everything",
    spec({ mode: "embedding", contextSize: 512, parallel: 2, gpuLayers: "auto", pooling: "mean", extraArgs: ["-t", "1"] }),
    [...BASE, "--ctx-size", "512", "--parallel", "2", "--n-gpu-layers", "auto", "--embeddings", "--pooling", "mean", "-t", "1"],
  ],
];

describe("buildLlamaServerArgs", () => {
  it.each(cases)("%s", (_name, input, expected) => {
    expect(buildLlamaServerArgs(input, SOCK)).toEqual(expected);
  });

  it("keeps a model path with spaces as one argument", () => {
    const args = buildLlamaServerArgs(spec({ modelPath: "/models/my model.gguf" }), SOCK);
    expect(args[args.indexOf("--model") + 1]).toBe("/models/my model.gguf");
  });
});

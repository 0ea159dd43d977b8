import { describe, expect, it } from "vitest";
import { runnerSpec, type Launch, type LaunchSettings } from "../../sidecar/args.ts";
import type { RunnerMode, RunnerSpec } from "../../sidecar/spec.ts";

// What a runner starts with, from the model, its settings and what the scheduler decided.

const MODEL = { id: "sha256:0123456789abcdef", ggufPath: "/models/m.gguf" };
const LAUNCH: Launch = { slots: 2, threads: 4, alias: "ai/m:latest" };
/** The spec with nothing but the defaults: 2 slots + 8 spare HTTP threads. */
const base = (extra: Partial<RunnerSpec> = {}, extraArgs: string[] = []): RunnerSpec => ({
  name: "0123456789ab-completion-7",
  alias: "ai/m:latest",
  modelPath: "/models/m.gguf",
  mode: "completion",
  contextSize: undefined,
  parallel: 2,
  extraArgs: ["--threads", "4", "--threads-http", "10", ...extraArgs],
  ...extra,
});

const cases: Array<[string, { mode?: RunnerMode; settings?: LaunchSettings; launch?: Partial<Launch>; mmproj?: string }, RunnerSpec]> = [
  ["defaults", {}, base()],
  ["the name tells the mode and the serial apart", { mode: "embedding" }, base({ name: "0123456789ab-embedding-7", mode: "embedding" })],
  ["the multimodal projector", { mmproj: "/models/p.gguf" }, base({ mmprojPath: "/models/p.gguf" })],
  ["the configured context", { settings: { contextSize: 4096 } }, base({ contextSize: 4096 })],
  ["the chosen context wins over the configured one", { settings: { contextSize: 4096 }, launch: { contextSize: 2048 } }, base({ contextSize: 2048 })],
  ["the GPU layers and the pooling chosen", { launch: { gpuLayers: "all", pooling: "mean" } }, base({ gpuLayers: "all", pooling: "mean" })],
  ["an HTTP thread for each request held ahead in llama-server's queue", { launch: { ahead: 3 } }, base({ extraArgs: ["--threads", "4", "--threads-http", "13"] })],
  ["the reasoning budget", { settings: { reasoningBudget: 0 } }, base({}, ["--reasoning-budget", "0"])],
  [
    "a draft model with its limits",
    { settings: { speculative: { draftPath: "/models/d.gguf", numTokens: 8, minAcceptanceRate: 0.5 } } },
    base({}, ["--model-draft", "/models/d.gguf", "--spec-draft-n-max", "8", "--spec-draft-p-min", "0.5"]),
  ],
  [
    "the host prompt cache in whole MiB, and the checkpoints per slot",
    { launch: { promptCache: { bytes: 1.5 * 1024 * 1024 + 1, checkpoints: 4 } } },
    base({}, ["--cache-ram", "2", "--ctx-checkpoints", "4"]),
  ],
  ["the prompt cache off", { launch: { promptCache: { bytes: 0, checkpoints: 0 } } }, base({}, ["--cache-ram", "0", "--ctx-checkpoints", "0"])],
  ["a draft model alone", { settings: { speculative: { draftPath: "/models/d.gguf" } } }, base({}, ["--model-draft", "/models/d.gguf"])],
  [
    "the model's own flags come last, so they win",
    { settings: { reasoningBudget: -1, runtimeFlags: ["--threads", "1", "--threads-http", "2"] } },
    base({}, ["--reasoning-budget", "-1", "--threads", "1", "--threads-http", "2"]),
  ],
];

describe("runnerSpec", () => {
  it.each(cases)("%s", (_name, { mode = "completion", settings = {}, launch = {}, mmproj }, expected) => {
    const model = mmproj ? { ...MODEL, mmprojPath: mmproj } : MODEL;
    expect(runnerSpec(model, mode, settings, { ...LAUNCH, ...launch }, 7)).toEqual(expected);
  });
});

import { readFileSync } from "node:fs";
import { stat } from "node:fs/promises";
import { totalmem } from "node:os";
import { findOnPath } from "../../../sidecar/binary.ts";
import type { Runtime } from "../../runtime/types.ts";
import type { ModelRef } from "../types.ts";
import { cgroupMemoryLimit, memoryBudget, NVIDIA_SMI_ARGS, parseBytes, parseNvidiaSmi, type GpuDevice, type MemoryBudget } from "./budget.ts";

// The readings the budget is made of, taken once at start: nvidia-smi's devices, system memory, the
// cgroup's limit. And a model's size on disk, for its estimate.

type Env = Record<string, string | undefined>;

const NVIDIA_SMI_TIMEOUT_MS = 10_000;

/** The NVIDIA GPUs nvidia-smi lists; none when it is absent or fails. */
export async function queryGpus(runtime: Pick<Runtime, "spawn">, env: Env): Promise<GpuDevice[]> {
  const path = findOnPath("nvidia-smi", env);
  if (!path) return [];
  try {
    const childEnv = Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
    const child = await runtime.spawn(path, NVIDIA_SMI_ARGS, { env: childEnv });
    const timer = setTimeout(() => child.kill("SIGKILL"), NVIDIA_SMI_TIMEOUT_MS);
    const [out, , exit] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    clearTimeout(timer);
    return exit.code === 0 ? parseNvidiaSmi(out) : [];
  } catch {
    return [];
  }
}

const read = (path: string) => {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
};

export function systemMemory(): { systemBytes: number; cgroupBytes?: number } {
  const cgroupBytes = cgroupMemoryLimit({
    memoryMax: read("/sys/fs/cgroup/memory.max"),
    v1Limit: read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
  });
  // Deno without `--allow-sys` cannot read it: then only a cgroup limit or a set budget bounds it.
  let systemBytes = Infinity;
  try {
    systemBytes = totalmem();
  } catch {
    // unknown
  }
  return { systemBytes, ...(cgroupBytes !== undefined ? { cgroupBytes } : {}) };
}

export type BudgetSettings = { setting?: number; reserve: number; gpu: boolean };

/** Reads the devices and makes the budget (GPUs only when `gpu`: the runners will use them). */
export async function detectBudget(runtime: Pick<Runtime, "spawn">, env: Env, settings: BudgetSettings): Promise<MemoryBudget> {
  const gpus = settings.gpu ? await queryGpus(runtime, env) : [];
  return memoryBudget({ gpus, ...systemMemory(), ...(settings.setting !== undefined ? { setting: settings.setting } : {}), reserve: settings.reserve });
}

const sizeOnDisk = (path: string | undefined) => (path ? stat(path).then((s) => s.size, () => 0) : Promise.resolve(0));

/**
 * Bytes of a model's files as stored: its weights (all shards: the store's total, as the first
 * shard's path is all a model carries) and its projector.
 */
export async function modelBytes(model: ModelRef): Promise<number> {
  const [first, projector] = await Promise.all([sizeOnDisk(model.ggufPath), sizeOnDisk(model.mmprojPath)]);
  let total = 0;
  try {
    total = model.config?.size ? parseBytes(model.config.size) : 0;
  } catch {
    // A size shown some other way: the first file's is still known.
  }
  return Math.max(first, total) + projector;
}

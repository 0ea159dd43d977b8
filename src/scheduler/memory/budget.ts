// Where runners live and how much of it they may use: the GPUs when llama-server will use them
// (nvidia-smi's total and free per device), else system memory capped by a cgroup limit, as in a
// container. Pure: the readings come in as text, the decision goes out as numbers.

export type GpuDevice = { index: number; name: string; totalBytes: number; freeBytes: number };

export type MemoryBudget = {
  /** Where the runners' memory is: GPU memory, or system memory. */
  where: "gpu" | "cpu";
  /** Bytes the runners may use in all. */
  bytes: number;
  /** Where the number comes from: a setting, or the devices less the reserve. */
  source: "setting" | "detected";
  reserveBytes: number;
  devices: GpuDevice[];
  /**
   * Beside a GPU budget: the system memory the runners' host caches (prompt cache, checkpoints)
   * may use in all, less the reserve. A second budget that must hold as well. None on a CPU budget,
   * where those caches are in `bytes`.
   */
  hostBytes?: number;
};

const MIB = 1024 * 1024;

/** The query whose answer `parseNvidiaSmi` reads. */
export const NVIDIA_SMI_ARGS = ["--query-gpu=index,name,memory.total,memory.free", "--format=csv,noheader,nounits"];

/** `0, NVIDIA H100 80GB HBM3, 81559, 81007` lines (MiB); lines it cannot read are skipped. */
export function parseNvidiaSmi(output: string): GpuDevice[] {
  const devices: GpuDevice[] = [];
  for (const line of output.split("\n")) {
    const fields = line.split(",").map((f) => f.trim());
    if (fields.length < 4) continue;
    const [index, total, free] = [fields[0], fields.at(-2), fields.at(-1)].map(Number);
    // A name may itself hold commas: it is everything between the index and the two numbers.
    const name = fields.slice(1, -2).join(", ");
    if (![index, total, free].every((n) => Number.isFinite(n) && n! >= 0)) continue;
    devices.push({ index: index!, name, totalBytes: total! * MIB, freeBytes: free! * MIB });
  }
  return devices;
}

/** Bytes a cgroup allows: v2 `memory.max` ("max" or a number), else v1's limit (huge = none). */
export function cgroupMemoryLimit(files: { memoryMax?: string; v1Limit?: string }): number | undefined {
  const text = (files.memoryMax ?? files.v1Limit)?.trim();
  const value = Number(text);
  // cgroup v1 says "no limit" with a number near 2^63.
  if (!text || !Number.isFinite(value) || value <= 0 || value >= 2 ** 60) return undefined;
  return value;
}

const UNITS: Record<string, number> = { "": 1, b: 1, k: 1e3, kb: 1e3, m: 1e6, mb: 1e6, g: 1e9, gb: 1e9, t: 1e12, tb: 1e12, kib: 1024, mib: MIB, gib: 1024 * MIB, tib: 1024 ** 4 };

export const BYTES_PATTERN = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$/i;

/** `"8GiB"`, `"512MiB"`, `"2g"`, `"1000000"` (bytes). */
export function parseBytes(text: string): number {
  const match = BYTES_PATTERN.exec(text);
  if (!match) throw new Error(`invalid size "${text}" (e.g. 8GiB, 512MiB, 1000000)`);
  return Math.floor(Number(match[1]) * UNITS[(match[2] ?? "").toLowerCase()]!);
}

export type BudgetInputs = {
  /** Devices nvidia-smi listed (none: no GPU, or llama-server will not use one). */
  gpus: GpuDevice[];
  systemBytes: number;
  cgroupBytes?: number;
  /** A configured budget: taken as it is. */
  setting?: number;
  /** Kept back from what is detected (for the system, the driver, other programs). */
  reserve: number;
};

/**
 * The budget. On GPUs: the sum of their free memory when we start (what others use is theirs;
 * llama.cpp spreads a model's layers over all of them), less the reserve. Else system memory,
 * capped by the cgroup, less the reserve.
 */
export function memoryBudget({ gpus, systemBytes, cgroupBytes, setting, reserve }: BudgetInputs): MemoryBudget {
  const where = gpus.length > 0 ? "gpu" : "cpu";
  const system = Math.min(systemBytes, cgroupBytes ?? Infinity);
  const host = where === "gpu" ? { hostBytes: Math.max(0, system - reserve) } : {};
  const base = { where, reserveBytes: reserve, devices: gpus, ...host } as const;
  if (setting !== undefined) return { ...base, bytes: setting, source: "setting", reserveBytes: 0 };
  const detected = where === "gpu" ? gpus.reduce((sum, d) => sum + d.freeBytes, 0) : system;
  return { ...base, bytes: Math.max(0, detected - reserve), source: "detected" };
}

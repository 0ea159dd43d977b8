import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";

// The CPU cores our runners may use: those of the process's affinity mask (what
// availableParallelism reports on every runtime we run on), capped by a cgroup CPU quota, as a
// container's `--cpus` sets it. Read once at start.

/** Cores allowed by a cgroup quota: v2 `cpu.max` ("max 100000" or "150000 100000"), else v1's pair. */
export function cgroupCpuLimit(files: { cpuMax?: string; v1Quota?: string; v1Period?: string }): number | undefined {
  const [quota, period] = files.cpuMax !== undefined ? files.cpuMax.trim().split(/\s+/) : [files.v1Quota?.trim(), files.v1Period?.trim()];
  const q = Number(quota);
  const p = Number(period);
  if (!Number.isFinite(q) || !Number.isFinite(p) || q <= 0 || p <= 0) return undefined;
  return Math.max(1, Math.ceil(q / p));
}

const read = (path: string) => {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
};

export function cpuBudget(): number {
  const limit = cgroupCpuLimit({
    cpuMax: read("/sys/fs/cgroup/cpu.max"),
    v1Quota: read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
    v1Period: read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
  });
  return Math.max(1, Math.min(availableParallelism(), limit ?? Infinity));
}

import { existsSync, readFileSync } from "node:fs";

// CPU time a process has spent, for benches that print CPU per request: on a shared machine it is
// far steadier than req/s.

/** User + system CPU time of a process so far, in microseconds (Linux; 0 elsewhere or without a pid). */
export function cpuMicros(pid: number | undefined): number {
  const stat = `/proc/${pid}/stat`;
  if (pid === undefined || !existsSync(stat)) return 0;
  const fields = readFileSync(stat, "utf8").split(") ")[1]!.split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / 100; // clock ticks of 10 ms
}

import { existsSync, readdirSync, readFileSync } from "node:fs";

// CPU time a process has spent, for benches that print CPU per request: on a shared machine it is
// far steadier than req/s.

/** User + system CPU time of a process so far, in microseconds (Linux; 0 elsewhere or without a pid). */
export function cpuMicros(pid: number | undefined): number {
  const stat = `/proc/${pid}/stat`;
  if (pid === undefined || !existsSync(stat)) return 0;
  return statMicros(readFileSync(stat, "utf8"));
}

/** The fields of a `/proc/.../stat` line after the name (which may hold spaces): [0] is the state, [11] utime. */
export function statFields(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(") ") + 2).split(" ");
}

/** User + system time of a `/proc/.../stat` line, in microseconds. */
function statMicros(stat: string): number {
  const fields = statFields(stat);
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / 100; // clock ticks of 10 ms
}

/**
 * CPU time so far per thread name (Linux; empty elsewhere), in microseconds; the process's main
 * thread is "main". Bun runs its fetch client on a thread of its own ("HTTP Client") and compiles
 * on others; Node's V8 helpers (the optimizing compiler, the GC's) share the executable's name
 * with its main thread, which is why that one is told apart: where a proxy's time goes.
 */
export function threadMicros(pid: number | undefined): Map<string, number> {
  const times = new Map<string, number>();
  const tasks = `/proc/${pid}/task`;
  if (pid === undefined || !existsSync(tasks)) return times;
  for (const tid of readdirSync(tasks)) {
    let stat: string;
    try {
      stat = readFileSync(`${tasks}/${tid}/stat`, "utf8");
    } catch {
      continue; // the thread ended meanwhile
    }
    const name = tid === String(pid) ? "main" : stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    times.set(name, (times.get(name) ?? 0) + statMicros(stat));
  }
  return times;
}

/** Per-request CPU by thread between two readings, largest first: `bun 60, HTTP Client 40`. */
export function threadSplit(before: Map<string, number>, after: Map<string, number>, requests: number): string {
  return [...after]
    .map(([name, micros]) => [name, (micros - (before.get(name) ?? 0)) / requests] as const)
    .filter(([, perRequest]) => perRequest >= 0.5)
    .sort((a, b) => b[1] - a[1])
    .map(([name, perRequest]) => `${name} ${perRequest.toFixed(0)}`)
    .join(", ");
}

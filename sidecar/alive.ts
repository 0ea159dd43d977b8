import { readFileSync } from "node:fs";

/**
 * Whether the process `pid` still runs, asked of the OS now (not of our exit watch, which may
 * see a death a moment after a socket error shows it). On Linux a zombie, dead but not yet
 * reaped, counts as dead; elsewhere signal 0 tells whether the pid exists.
 */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The state follows the command name, which is in parentheses and may hold spaces.
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X" && state !== "x";
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

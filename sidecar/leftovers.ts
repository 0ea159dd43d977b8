import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { kill, pid as ourPid } from "node:process";
import * as z from "zod";
import { clearStaleSocket, removeSocket } from "../src/runtime/socket-file.ts";

// Each runner leaves `<name>.pid` in the run folder while it runs. If our process dies without
// stopping it (a crash, SIGKILL, or a system without parent-death signals), the next start finds
// the file and ends the process, but only after checking that the pid is still that llama-server
// (its command line names the socket), since a pid can be reused by an unrelated process. That
// check reads /proc, so it works on Linux only; elsewhere a record whose pid still runs is left as
// it is (neither killed nor its socket removed), since we cannot tell what that pid now is.

const pidFileSchema = z.object({ pid: z.int().positive(), owner: z.int().positive(), socket: z.string() });
export type PidFile = z.infer<typeof pidFileSchema>;

const DEATH_WAIT_MS = 5_000;

export function pidFilePath(runDir: string, name: string): string {
  return join(runDir, `${name}.pid`);
}

export function writePidFile(path: string, record: Omit<PidFile, "owner">): void {
  writeFileSync(path, JSON.stringify({ ...record, owner: ourPid }));
}

function isAlive(pid: number): boolean {
  try {
    kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

function commandLine(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  } catch {
    return [];
  }
}

/** Whether this system shows command lines in /proc, which telling our runners apart needs. */
function canReadCommandLines(): boolean {
  return existsSync(`/proc/${ourPid}/cmdline`);
}

function isOurRunner(record: PidFile): boolean {
  const args = commandLine(record.pid);
  const host = args.indexOf("--host");
  return host >= 0 && args[host + 1] === record.socket;
}

async function waitForDeath(pid: number): Promise<void> {
  const deadline = Date.now() + DEATH_WAIT_MS;
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
}

function readPidFile(path: string): PidFile | undefined {
  try {
    return pidFileSchema.parse(JSON.parse(readFileSync(path, "utf8")));
  } catch {
    return undefined;
  }
}

/** Ends the runner a record names and removes its socket; false if the record is not a leftover. */
async function endLeftover(record: PidFile): Promise<boolean> {
  // Its owner still runs: not a leftover. Our own pid counts as gone: this runs before any start
  // of ours, so the record is from an earlier run that had our pid (common in a container).
  if (record.owner !== ourPid && isAlive(record.owner)) return false;
  // Without /proc, a live pid cannot be told from an unrelated process that reused it.
  if (isAlive(record.pid) && !canReadCommandLines()) return false;
  if (isOurRunner(record)) {
    kill(record.pid, "SIGKILL");
    await waitForDeath(record.pid);
  }
  removeSocket(record.socket);
  return true;
}

async function cleanupPidFile(path: string): Promise<void> {
  const record = readPidFile(path);
  if (record && !(await endLeftover(record))) return;
  rmSync(path, { force: true });
}

/** Ends the runners a previous run of ours left, and removes their pid files and dead sockets. */
export async function cleanupLeftovers(runDir: string): Promise<void> {
  mkdirSync(runDir, { recursive: true });
  const files = readdirSync(runDir);
  for (const file of files.filter((f) => f.endsWith(".pid"))) await cleanupPidFile(join(runDir, file));
  for (const file of files.filter((f) => f.endsWith(".sock"))) {
    // A socket someone still answers on belongs to a live server: not ours to remove.
    await clearStaleSocket(join(runDir, file)).catch(() => undefined);
  }
  // The links of a split model's runner (shards.ts) that no runner of that name runs with now.
  for (const folder of files.filter((f) => f.endsWith(".shards"))) {
    if (!existsSync(pidFilePath(runDir, folder.slice(0, -".shards".length)))) rmSync(join(runDir, folder), { recursive: true, force: true });
  }
}

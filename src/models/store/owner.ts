import { randomBytes } from "node:crypto";
import { readFileSync, readlinkSync } from "node:fs";
import { hostname } from "node:os";

// Who holds a lock or a lease on the store, and when another process may judge that it is gone.
// Several processes share a store (replicas on one volume, a pull in an init container beside a
// server, on one machine or on several over NFS), so a holder is named by its pid and by the
// process table that pid belongs to: only a process that sees the same table may ask the OS
// whether the pid still runs. Any other may only judge by the heartbeat: the holder touches its
// file every few seconds, and a file whose heartbeat stopped long enough is stale.

export type Owner = {
  pid: number;
  /** The boot and pid namespace the pid belongs to (see `processTable`); "" when it could not be read. */
  table: string;
  /** The host name; "" when it could not be read. */
  hostname: string;
  /** Unique per lock or lease taken: tells whether a file is still the one its taker wrote. */
  token: string;
};

/** How often a holder touches its file, and how long without a touch makes it stale. */
export type Heartbeat = { everyMs: number; staleMs: number };

/**
 * The boot (one per machine and boot, shared by its containers) and the pid namespace: two
 * processes with the same value see the same pids. "" where /proc cannot be read (not Linux, or
 * Deno, which reads it only with `--allow-all`): the host name then stands in, a weaker name
 * (two containers may share one without sharing pids), so a pid named by it alone is trusted only
 * together with a stopped heartbeat.
 */
function readProcessTable(): string {
  try {
    const boot = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    return `${boot}/${readlinkSync("/proc/self/ns/pid")}`;
  } catch {
    return "";
  }
}

function readHostname(): string {
  try {
    return hostname();
  } catch {
    return ""; // Deno without --allow-sys
  }
}

let self: Omit<Owner, "token"> | undefined;
/** This process, as a lock or lease names its holder. */
export const thisProcess = () => (self ??= { pid: process.pid, table: readProcessTable(), hostname: readHostname() });

export const newOwner = (): Owner => ({ ...thisProcess(), token: randomBytes(9).toString("hex") });

/** Whether `pid` runs in our process table: undefined when the OS will not say (Deno without `--allow-run`). */
export function pidAlive(pid: number): boolean | undefined {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ESRCH") return false;
    // EPERM: it runs, under another user.
    return code === "EPERM" ? true : undefined;
  }
}

/** A lock or lease file as one look at it found it. */
export type Sighting = {
  /** Its content; undefined when it is empty or unreadable (its taker died before writing it, or writes it now). */
  owner: Owner | undefined;
  /** Its last heartbeat, by the clock of whoever touched it. */
  mtimeMs: number;
};

export type Judge = {
  /** Who judges: its process table and host name (`thisProcess()`). */
  self: Pick<Owner, "table" | "hostname">;
  /** Our wall clock, to age `mtimeMs`. */
  now: number;
  heartbeat: Heartbeat;
  alive(pid: number): boolean | undefined;
  /** How long we have watched the file keep this very heartbeat (our own monotonic clock): immune to skew between machines. */
  unchangedForMs?: number;
};

/** Beats a live holder named only by its host name cannot miss, even stalled for a moment. */
const BEATS_MISSED = 3;

/** Whether the holder's pid is ours to ask about, and how surely: by process table, or by host name only. */
function samePids(owner: Owner, self: Judge["self"]): "table" | "hostname" | undefined {
  if (owner.table !== "" && self.table !== "") return owner.table === self.table ? "table" : undefined;
  return owner.hostname !== "" && owner.hostname === self.hostname ? "hostname" : undefined;
}

/** Whether the holder is surely dead: its pid, asked in its own process table, has exited (it can write nothing more). */
export const holderExited = (seen: Sighting, judge: Judge): boolean =>
  !!seen.owner && samePids(seen.owner, judge.self) === "table" && judge.alive(seen.owner.pid) === false;

/** Why the holder of what was sighted is gone, or undefined while it may still hold it. */
export function staleReason(seen: Sighting, judge: Judge): string | undefined {
  const { owner } = seen;
  // Same host, same clock: the age is true.
  const age = judge.now - seen.mtimeMs;
  const by = owner && samePids(owner, judge.self);
  if (owner && by && judge.alive(owner.pid) === false && (by === "table" || age > BEATS_MISSED * judge.heartbeat.everyMs)) {
    return `its holder (pid ${owner.pid}) has exited`;
  }
  const { staleMs } = judge.heartbeat;
  if (age > staleMs) return `its holder has not touched it for ${Math.round(age / 1000)} s`;
  if (judge.unchangedForMs !== undefined && judge.unchangedForMs > staleMs) {
    return `its heartbeat has not moved for ${Math.round(judge.unchangedForMs / 1000)} s`;
  }
  return undefined;
}

export function parseOwner(text: string): Owner | undefined {
  try {
    const value = JSON.parse(text) as Partial<Owner>;
    if (typeof value.pid === "number" && typeof value.table === "string" && typeof value.hostname === "string" && typeof value.token === "string") {
      return { pid: value.pid, table: value.table, hostname: value.hostname, token: value.token };
    }
  } catch {
    // Empty or half-written: judged by its age alone.
  }
  return undefined;
}

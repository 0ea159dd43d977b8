import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { UsageFilter, UsageRow } from "../inference/usage/ledger.ts";
import { LOCAL_CALLER, type Caller } from "../keys/keyring.ts";
import type { PullStatus, StoredModel } from "../models/index.ts";
import type { RunnerInfo, RunnerSlots } from "../scheduler/api.ts";
import { keepAliveMs } from "../scheduler/policy.ts";
import { sessionsState } from "./sessions.ts";

// The live state the page's views show and `GET /engines/events` streams: runners, the models in
// the store, the pulls in progress, and the agent sessions on the runners' slots, in one JSON
// object, as the caller may see it (sessions.ts).

export type StateDeps = {
  runners: () => RunnerInfo[];
  models: () => Promise<StoredModel[]>;
  pulls: () => PullStatus[];
  /** Loads in progress and the last loads of each model (see inference/loads.ts). */
  loads?: () => unknown;
  /** The engines' last events (pulls, moves to another build and why one failed: src/engines/events.ts). */
  engineEvents?: () => unknown[];
  /** The sidecar's pid files (`<id12>-<mode>-<serial>.pid`), for the runners' memory. */
  runDir: string;
  /** The runners' slot tables (the scheduler's `slotTables`), for the sessions view. */
  slotTables?: () => RunnerSlots[];
  /** The usage ledger's rows, for the sessions view's tokens. */
  usage?: (filter: UsageFilter) => UsageRow[];
  /** The clock (epoch ms) that says which day's tokens are shown. */
  now?: () => number;
};

export type LiveState = Awaited<ReturnType<typeof liveState>>;

/**
 * When an idle runner is unloaded (epoch ms): a time, not a countdown, so that the state changes
 * only when something happens; null while in use or when it is kept forever.
 */
export function unloadsAt(r: Pick<RunnerInfo, "inUse" | "waiting" | "lastUsed" | "keepAlive" | "state">): number | null {
  if (r.state !== "ready" || r.inUse > 0 || r.waiting > 0) return null;
  const ms = keepAliveMs(r.keepAlive);
  return Number.isFinite(ms) ? r.lastUsed + ms : null;
}

/** The live state as `caller` may see it (the sessions view: its own, or every key's for an admin). */
export async function liveState(deps: StateDeps, caller: Caller = LOCAL_CALLER) {
  const memory = await runnerMemory(deps.runDir);
  const runners = deps.runners().map((r) => ({
    model: r.model,
    id: r.modelId,
    mode: r.mode,
    state: r.state,
    in_use: r.inUse,
    waiting: r.waiting,
    keep_alive: r.keepAlive,
    unloads_at: unloadsAt(r),
    memory_bytes: memory.get(`${r.modelId.replace(/^sha256:/, "").slice(0, 12)}-${r.mode}`) ?? null,
  }));
  const models = (await deps.models()).map((m) => ({
    name: m.tags[0] ?? m.id,
    id: m.id,
    tags: m.tags,
    created: m.created,
    size: m.config.size ?? null,
    parameters: m.config.parameters ?? null,
    quantization: m.config.quantization ?? null,
  }));
  const day = new Date(deps.now?.() ?? Date.now()).toISOString().slice(0, 10);
  const sessions = sessionsState(deps.slotTables?.() ?? [], deps.usage?.({ day }) ?? [], day, caller);
  return { runners, models, pulls: deps.pulls(), loads: deps.loads?.() ?? null, engine_events: deps.engineEvents?.() ?? [], sessions };
}

/**
 * Resident memory of each runner process, by `<id12>-<mode>`, read from /proc (Linux); elsewhere,
 * or for a process already gone, nothing. The newest runner of a model and mode wins.
 */
async function runnerMemory(runDir: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const names = (await readdir(runDir).catch(() => [] as string[])).filter((n) => n.endsWith(".pid")).sort(bySerial);
  for (const name of names) {
    const record = await readFile(join(runDir, name), "utf8").then((t) => JSON.parse(t) as { pid?: number }, () => undefined);
    const status = record?.pid ? await readFile(`/proc/${record.pid}/status`, "utf8").catch(() => "") : "";
    const kib = /^VmRSS:\s+(\d+) kB/m.exec(status)?.[1];
    if (kib) out.set(name.replace(/-\d+\.pid$/, ""), Number(kib) * 1024);
  }
  return out;
}

const serialOf = (name: string) => Number(/-(\d+)\.pid$/.exec(name)?.[1] ?? 0);
const bySerial = (a: string, b: string) => serialOf(a) - serialOf(b);

import { basename } from "node:path";
import type { RunnerProcess, RunnerSpec, SlotParking, StartRunner } from "../scheduler/types.ts";
import type { CacheKey, SlotFolder } from "./folder.ts";
import { promptHolders, SOMEONE } from "./per-key.ts";
import { slotCopier } from "./copy.ts";
import { slotParking } from "./parking.ts";
import { slotAction, trySlotAction } from "./slot-api.ts";

// A completion runner's prompt caches outlive it: when it is stopped (evicted, expired, unloaded,
// reloaded, SIGTERM; not when it crashed or was killed for hanging), each slot holding a prompt
// is saved with llama-server's slot API into the folder; when a runner with the same key starts,
// the saved slots are restored before it serves its first request, so a conversation that goes
// on reuses its cache instead of processing its whole prompt again. A slot that holds an agent
// session's conversation is parked for that session instead (parking.ts), restored when the
// session comes back, into whichever slot it is given. Only we call the slot API: clients never
// reach it, and never name a file.

export type SlotCacheHooks = {
  folder: SlotFolder;
  /** The build the runner runs (its version, and which build): a cache another engine saved is never loaded. */
  engine: (spec?: RunnerSpec) => Promise<string>;
  /** How long a stopping runner's saves may take now (0: none is made). */
  saveWithinMs: () => number;
  /** How long a loading runner's restores may take in all; default a minute. */
  restoreWithinMs?: number;
  /** Told when a runner begins restoring its slots. */
  restoring?: (spec: RunnerSpec) => void;
  /** Told how many slots a runner restored (0 when none). */
  restored?: (spec: RunnerSpec, slots: number) => void;
  /**
   * Prompts are kept per key (per-key.ts): an entry keeps the names of the keys whose prompts its
   * runner held, and a runner that restores it holds them (an entry saved without names: someone's).
   */
  perKey?: boolean;
  /** Conversations displaced from their slots are parked in the folder (parking.ts). */
  parking?: boolean;
  log?: (line: string) => void;
};

/** How long a loading runner's restores may take in all, by default (a few GiB read from disk at most). */
const RESTORE_TIMEOUT_MS = 60_000;

/** Flags that change only where or how fast the cache is computed, not what it holds. */
const PLACEMENT_FLAGS = new Set(["-t", "--threads", "-tb", "--threads-batch", "--threads-http", "-ngl", "--n-gpu-layers", "--gpu-layers", "--slot-save-path"]);

/** The key of a runner's caches: the model's blob (its digest), the engine, and every setting that changes the cache. */
export function cacheKey(spec: RunnerSpec, engine: string): CacheKey {
  const flags: string[] = [];
  const args = spec.extraArgs ?? [];
  for (let i = 0; i < args.length; i++) {
    const [flag, inline] = args[i]!.split("=", 2);
    if (!PLACEMENT_FLAGS.has(flag!)) flags.push(args[i]!);
    else if (inline === undefined && args[i + 1] !== undefined && !args[i + 1]!.startsWith("-")) i++;
  }
  return {
    engine,
    model: basename(spec.modelPath),
    ...(spec.modelShards ? { shards: spec.modelShards.map((path) => basename(path)) } : {}),
    mmproj: spec.mmprojPath && basename(spec.mmprojPath),
    contextSize: spec.contextSize,
    parallel: spec.parallel ?? 1,
    flags,
  };
}

export function withSlotCache(start: StartRunner, hooks: SlotCacheHooks): StartRunner {
  const log = hooks.log ?? ((line: string) => console.error(line));
  return async (spec, signal) => {
    // Embeddings and reranking hold no conversation.
    if (spec.mode !== "completion") return start(spec, signal);
    const key = cacheKey(spec, await hooks.engine(spec));
    // A folder that cannot be used (a read-only disk) costs the cache, never the load.
    const usable = await hooks.folder.prune().then(
      () => true,
      (error: Error) => (log(`slot cache: ${hooks.folder.dir} cannot be used (${error.message}): runners start without it`), false),
    );
    if (!usable) return start(spec, signal);
    const runner = await start({ ...spec, extraArgs: [...(spec.extraArgs ?? []), "--slot-save-path", hooks.folder.dir] }, signal);
    const cached: RunnerProcess = {
      fetch: runner.fetch,
      exited: runner.exited,
      running: () => runner.running(),
      kill: () => runner.kill(),
      copySlot: slotCopier(runner, hooks.folder, key),
      ...(hooks.parking ? { parking: slotParking(runner, hooks.folder, key, spec.name, log) } : {}),
      stop: async (held) => {
        // A runner unloaded while it loaded has nothing new to keep.
        const holders = hooks.perKey ? [...promptHolders(cached)] : undefined;
        const sessions = cached.parking && held ? { parking: cached.parking, held } : undefined;
        if (!signal?.aborted) await save(runner, key, spec, hooks, log, holders, sessions).catch((error: Error) => log(`slot cache: ${spec.name}: not saved: ${error.message}`));
        await runner.stop();
      },
    };
    try {
      hooks.restoring?.(spec);
      const restored = await restore(runner, key, spec, hooks, log, signal);
      if (hooks.perKey) for (const names of restored.holders) for (const name of names ?? [SOMEONE]) promptHolders(cached).add(name);
      hooks.restored?.(spec, restored.slots);
    } catch (error) {
      await runner.stop().catch(() => {});
      throw error;
    }
    return cached;
  };
}

/** Restores each slot that has a sound entry (one that llama-server refuses is removed): how many, and the key names each was saved with. */
async function restore(runner: RunnerProcess, key: CacheKey, spec: RunnerSpec, hooks: SlotCacheHooks, log: (line: string) => void, signal?: AbortSignal) {
  const { folder } = hooks;
  const within = hooks.restoreWithinMs ?? RESTORE_TIMEOUT_MS;
  let restored = 0;
  const holders: (string[] | undefined)[] = [];
  // A runner that does not answer its restores in time is left to serve without them (its
  // entries stay: the file was sound): the load is never held up past this.
  const late = AbortSignal.timeout(within);
  for (let slot = 0; slot < (spec.parallel ?? 1); slot++) {
    signal?.throwIfAborted();
    const filename = await folder.checkout(key, slot);
    if (!filename) continue;
    // A restore that fails costs the cache, never the load (unless the load itself was called off).
    const answer = await slotAction(runner, slot, "restore", filename, signal ? AbortSignal.any([signal, late]) : late).catch((error: Error) => {
      if (signal?.aborted) throw error;
      return { ok: false, text: error.message, saved: 0 };
    });
    if (late.aborted) {
      log(`slot cache: ${spec.name}: restores not done within ${within} ms: it serves without them`);
      break;
    }
    if (answer.ok) {
      restored++;
      if (hooks.perKey) holders.push(await folder.holders(key, slot));
    } else {
      log(`slot cache: ${spec.name}: slot ${slot} not restored (${answer.text}): removed`);
      await folder.discard(key, slot);
    }
  }
  return { slots: restored, holders };
}

/**
 * Saves every slot that holds a prompt, within the time the hooks give; a save not done by then is
 * dropped. A slot that holds an agent session's conversation (`sessions`, by the slot table) is
 * parked as that session's instead: a runner restoring by slot number would not know whose
 * conversation it had, and the session, placed anew, would process it again.
 */
async function save(runner: RunnerProcess, key: CacheKey, spec: RunnerSpec, hooks: SlotCacheHooks, log: (line: string) => void, holders?: string[], sessions?: { parking: SlotParking; held: ReadonlyMap<number, string> }): Promise<void> {
  const ms = hooks.saveWithinMs();
  if (ms <= 0 || !runner.running()) return;
  const deadline = AbortSignal.timeout(ms);
  const response = await runner.fetch("http://runner/slots", { signal: deadline });
  if (!response.ok) throw new Error(`/slots answered ${response.status}`);
  const slots = ((await response.json()) as { id: number; n_prompt_tokens?: number }[]).filter((s) => (s.n_prompt_tokens ?? 0) > 0);
  await Promise.all(
    slots.map(async ({ id }) => {
      const session = sessions?.held.get(id);
      // A park that fails is logged there, and costs that session its conversation processed again.
      if (session !== undefined) return void (await sessions!.parking.park(id, session, deadline));
      const file = hooks.folder.saving(key, id);
      const answer = await trySlotAction(runner, id, "save", file, deadline);
      if (answer.ok) {
        if (!(await hooks.folder.commit(file, key, id, answer.saved, holders))) log(`slot cache: ${spec.name}: slot ${id} not saved (larger than INFERENCE_SLOT_CACHE_BUDGET)`);
        return;
      }
      hooks.folder.abandon(file);
      log(`slot cache: ${spec.name}: slot ${id} not saved (${answer.text})`);
    }),
  );
}

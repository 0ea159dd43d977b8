import { createHash } from "node:crypto";
import type { RunnerProcess, SlotParking } from "../scheduler/types.ts";
import type { CacheKey, EntryName, SlotFolder } from "./folder.ts";
import { trySlotAction } from "./slot-api.ts";

// Conversations displaced from their slots (src/scheduler/affinity.ts), kept in the slot-cache
// folder as entries named for their session: saved with llama-server's slot API when another
// session is given the slot, restored into the slot their session is given when it comes back,
// then removed (it is in a slot again; displaced once more, it is saved afresh). A runner that
// stops parks the sessions still in its slots the same way (runner.ts). Entries count in
// the folder's budget, least recently used dropped first. Session names come from the slot table,
// which names each within its key: an entry is never restored for another key's request.
//
// The entry's name is all it takes to find it again: the key's hash (model, engine build, context,
// slots, cache flags: see runner.ts's cacheKey) and the session's digest. So a runner that loads
// after a restart or a reload lists the entries its key's runners parked (`earlier`), and a session
// among them gets its conversation back as if this runner had parked it; the checkout still checks
// the entry's key, size and digest, and a file another key, build or setting saved is never found.

/** The entry of a session: a digest, so that a client's name never reaches a path. */
const entryOf = (session: string): EntryName => `p${createHash("sha256").update(session).digest("hex").slice(0, 32)}`;

/** `earlier`: the entries of this key parked before this runner loaded (see folder.ts's `parked`). */
export function slotParking(runner: RunnerProcess, folder: SlotFolder, key: CacheKey, name: string, log: (line: string) => void, earlier = new Set<EntryName>()): SlotParking {
  return {
    keeps: (session) => earlier.size > 0 && earlier.has(entryOf(session)),
    async park(slot, session, signal) {
      const entry = entryOf(session);
      // Parked afresh: this runner knows it from now on.
      earlier.delete(entry);
      const file = folder.saving(key, entry);
      const saved = await trySlotAction(runner, slot, "save", file, signal);
      if (!saved.ok) {
        log(`slot cache: ${name}: slot ${slot} not parked (${saved.text}): its session processes its conversation again`);
        await folder.drop(file);
        return false;
      }
      if (await folder.commit(file, key, entry, saved.saved)) return true;
      log(`slot cache: ${name}: slot ${slot} not parked (larger than INFERENCE_SLOT_CACHE_BUDGET): its session processes its conversation again`);
      return false;
    },
    async unpark(session, slot) {
      const entry = entryOf(session);
      earlier.delete(entry);
      const file = await folder.checkout(key, entry);
      if (!file) {
        log(`slot cache: ${name}: a parked conversation is gone (dropped for the folder's budget, or unsound): its session processes it again`);
        return false;
      }
      const restored = await trySlotAction(runner, slot, "restore", file);
      if (!restored.ok) log(`slot cache: ${name}: a parked conversation not restored into slot ${slot} (${restored.text}): its session processes it again`);
      await folder.discard(key, entry);
      return restored.ok;
    },
  };
}

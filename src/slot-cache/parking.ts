import { createHash } from "node:crypto";
import type { RunnerProcess, SlotParking } from "../scheduler/types.ts";
import type { CacheKey, SlotFolder } from "./folder.ts";
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
// slots, cache flags: see runner.ts's cacheKey) and the session's digest. So a session this runner
// did not park is looked up in the folder by that name when it is placed (`keeps`): one parked by a
// runner of the same key before this one loaded (a restart, a reload), or by another process on the
// same folder (a replica of a pool on one store that stopped, its sessions sent here), gets its
// conversation back as if this runner had parked it. The checkout still checks the entry's key,
// size and digest, and a file another key, build or setting saved is never found.

/** The entry of a session: a digest, so that a client's name never reaches a path. */
const entryOf = (session: string): `p${string}` => `p${createHash("sha256").update(session).digest("hex").slice(0, 32)}`;

export function slotParking(runner: RunnerProcess, folder: SlotFolder, key: CacheKey, name: string, log: (line: string) => void): SlotParking {
  return {
    // Asked only for a session that holds no slot here: one stat per such placement.
    keeps: (session) => folder.isParked(key, entryOf(session)),
    async park(slot, session, signal) {
      const entry = entryOf(session);
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

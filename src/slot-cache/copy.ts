import type { RunnerProcess, SlotCopy } from "../scheduler/types.ts";
import type { CacheKey, SlotFolder } from "./folder.ts";
import { slotAction, trySlotAction } from "./slot-api.ts";

// One slot copied into others (src/scheduler/prefix-copies.ts): llama-server saves the slot into
// a file of the folder it was given, and restores that file into each other slot. The file is the
// folder's for a moment only (a `.part` name, which a prune leaves while it is in use and removes
// if a crash left it), never an entry a later runner would restore.

export function slotCopier(runner: RunnerProcess, folder: SlotFolder, key: CacheKey): (from: number) => Promise<SlotCopy | undefined> {
  return async (from) => {
    const file = folder.saving(key, from);
    const saved = await trySlotAction(runner, from, "save", file);
    if (!saved.ok) {
      await folder.drop(file);
      return undefined;
    }
    return {
      restore: async (slot) => (await slotAction(runner, slot, "restore", file)).ok,
      drop: () => folder.drop(file),
    };
  };
}

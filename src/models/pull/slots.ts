// A limit on pulls running at once (Docker Model Runner allows 2): each pull takes a slot before
// it talks to a registry and gives it back when it ends. Pulls beyond the limit wait in arrival
// order; one whose signal aborts while it waits leaves the line without ever running.

export const DEFAULT_MAX_CONCURRENT_PULLS = 2;

export type Slots = {
  /** Resolves with the function that gives the slot back; rejects with `signal.reason` if it aborts first. */
  acquire(signal: AbortSignal): Promise<() => void>;
};

export function createSlots(limit: number): Slots {
  let taken = 0;
  const line: (() => void)[] = [];

  // A slot given back goes straight to the first in line, so a newcomer cannot overtake it.
  function giveBack(): void {
    const next = line.shift();
    if (next) next();
    else taken -= 1;
  }

  function slot(): () => void {
    let held = true;
    return () => {
      if (held) giveBack();
      held = false;
    };
  }

  return {
    async acquire(signal) {
      signal.throwIfAborted();
      if (taken < limit) {
        taken += 1;
        return slot();
      }
      return new Promise((resolve, reject) => {
        const turn = () => {
          signal.removeEventListener("abort", leave);
          resolve(slot());
        };
        const leave = () => {
          line.splice(line.indexOf(turn), 1);
          reject(signal.reason);
        };
        line.push(turn);
        signal.addEventListener("abort", leave, { once: true });
      });
    },
  };
}

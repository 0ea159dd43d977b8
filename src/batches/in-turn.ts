// One step at a time per key, within this process: a check and the change it gates, run as one.

/**
 * Runs the works given the same key one after another: a check and the change it gates are then
 * one step (two uploads of a key cannot both pass its quota's last room; a batch cannot take a
 * file as input while it is being deleted).
 */
export function inTurn() {
  const tails = new Map<string, Promise<unknown>>();
  return <T>(key: string, work: () => Promise<T>): Promise<T> => {
    const turn = (tails.get(key) ?? Promise.resolve()).then(work, work);
    const tail = turn.catch(() => {});
    tails.set(key, tail);
    void tail.then(() => tails.get(key) === tail && tails.delete(key));
    return turn;
  };
}

// Batches take turns to run: at most `max` at once, the others wait. A turn that frees goes to the
// oldest waiting batch of the key with the fewest batches running, so that one key's many batches
// do not keep every other key's waiting behind them all. A batch keeps its turn until it ends.

type Turn = { id: string; owner: string };

/** Which of `waiting` (oldest first) takes a free turn, given the owners of those running. */
export function nextTurn(waiting: readonly Pick<Turn, "owner">[], runningOwners: readonly string[]): number {
  const runs = (owner: string) => runningOwners.filter((o) => o === owner).length;
  let best = 0;
  for (let i = 1; i < waiting.length; i++) if (runs(waiting[i]!.owner) < runs(waiting[best]!.owner)) best = i;
  return best;
}

/** Turns for items run by `run`, which must not reject (it ends with the item, however it ends). */
export function createTurns<T extends Turn>(max: number, run: (item: T) => Promise<void>) {
  const running = new Map<string, { owner: string; job: Promise<void> }>();
  const waiting: T[] = [];
  let closed = false;
  const launch = (item: T) => {
    const job = run(item).finally(() => {
      running.delete(item.id);
      pump();
    });
    running.set(item.id, { owner: item.owner, job });
  };
  const pump = () => {
    while (!closed && running.size < max && waiting.length) {
      launch(waiting.splice(nextTurn(waiting, [...running.values()].map((r) => r.owner)), 1)[0]!);
    }
  };
  const withdraw = (id: string) => {
    const at = waiting.findIndex((w) => w.id === id);
    if (at !== -1) waiting.splice(at, 1);
  };
  return {
    /** Queues `item` for a turn (nothing when it runs or waits already). */
    add(item: T): void {
      if (running.has(item.id) || waiting.some((w) => w.id === item.id)) return;
      waiting.push(item);
      pump();
    },
    /** Runs `item` now, without waiting for a turn (unless it runs already): for short work such as a cancel's. */
    now(item: T): void {
      withdraw(item.id);
      if (!running.has(item.id)) launch(item);
    },
    /** No turn is given after this; resolves once what runs has ended. */
    async close(): Promise<void> {
      closed = true;
      await Promise.allSettled([...running.values()].map((r) => r.job));
    },
  };
}

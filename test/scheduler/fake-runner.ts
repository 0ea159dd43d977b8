import type { RunnerProcess, RunnerSpec, StartRunner } from "../../src/scheduler/types.ts";

// A recording stand-in for the sidecar's supervisor, for unit tests of scheduling policy only
// (the end-to-end tests run real llama-server processes).

/** `heldAtStop`: the sessions its stop was told its slots hold. */
export type FakeProcess = RunnerProcess & { spec: RunnerSpec; crash(message: string): void; stopped: boolean; heldAtStop?: ReadonlyMap<number, string> };

/** `fetchFor` gives a runner its own fetch (default: every request answers "ok"). */
export function fakeStarter(fetchFor?: (spec: RunnerSpec) => typeof fetch) {
  const started: FakeProcess[] = [];
  const pending: { spec: RunnerSpec; ready(): void; fail(error: Error): void }[] = [];
  const start: StartRunner = (spec, signal) =>
    new Promise((resolve, reject) => {
      let settleExit!: (error: Error) => void;
      let crashed = false;
      const exited = new Promise<Error>((r) => (settleExit = r));
      const process: FakeProcess = {
        spec,
        stopped: false,
        fetch: fetchFor?.(spec) ?? ((async () => new Response("ok")) as unknown as typeof fetch),
        exited,
        running: () => !crashed,
        // Like the real sidecar: `exited` does not settle after a stop we asked for.
        async stop(held) {
          process.stopped = true;
          process.heldAtStop = held;
        },
        async kill() {
          process.stopped = true;
        },
        crash: (message) => ((crashed = true), settleExit(new Error(message))),
      };
      signal?.addEventListener("abort", () => reject(signal.reason));
      pending.push({
        spec,
        ready: () => (started.push(process), resolve(process)),
        fail: reject,
      });
    });
  /** Lets every pending start finish (or fail), then lets the scheduler react. */
  const finishLoads = async (error?: Error) => {
    for (const load of pending.splice(0)) error ? load.fail(error) : load.ready();
    await tick();
  };
  return { start, started, pending, finishLoads };
}

/** Lets pending promise callbacks run (timers may be faked, so no setTimeout here). */
export async function tick(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

import { configDefaults, defineConfig } from "vitest/config";
import { BaseSequencer, type TestSpecification } from "vitest/node";

// Test files that mostly wait (on clocks, sockets and the processes they start): each kept at most
// about one of two cores busy, measured over a whole run (CPU time of the machine while the file
// ran, one file at a time). They run three at a time, first; the rest, which compute, one at a
// time after them: two cores are shared by the test and every server and process it starts, and
// a computing test beside another is slowed and may time out. Run one after another, these took
// about 10 of the run's 21 minutes while the machine was half idle. A new file runs with the
// computing ones until measured. The deploy tests stay there too: they share podman's storage.
// Listed longest first (their time, one at a time, and the machine's busy share while they ran),
// and started in that order, so that no long one starts last and runs alone.
const WAITING = [
  "test/usage/token-limit.test.ts", // about 70 s: a minute's tokens waited out (was 60 s of usage.test.ts)
  "test/inference/socket-silence.test.ts", // 49 s, 52% of two cores
  "test/agents/droid.test.ts", // 45 s, 55%
  "test/agents/qwen.test.ts", // 39 s, 56%
  "test/agents/copilot.test.ts", // 31 s, 56%
  "test/agents/claude.test.ts", // 30 s, 56%
  "test/models/shared-store.test.ts", // 27 s, 29%
  "test/inference/hung-runner.test.ts", // 26 s, 17% (52 s before its runtimes ran concurrently)
  "test/e2e/body-deadline.test.ts", // 24 s, 4% (104 s before its cases ran concurrently)
  "test/models/ranged-pull.test.ts", // 24 s, 27%
  "test/engines/pull-progress.test.ts", // 23 s, 44%
  "test/e2e/slow-clients.test.ts", // 18 s, 8%
  "test/batches/files.test.ts", // 16 s, 28%
  "test/decisions/engine.test.ts", // 16 s, 5%
  "test/inference/prompt-cache.test.ts", // 12 s, 55%
  "test/scheduler/watchdog.test.ts", // 12 s, 6%
  "test/web/runtimes.test.ts", // 11 s, 34%
  "test/runtime/slow-reader.test.ts", // 10 s, 14%
  "test/models/store-locks.test.ts", // 9 s, 36%
  "test/scheduler/batch-lane.test.ts", // 9 s, 18%
  "test/scheduler/memory/prompt-cache.test.ts", // 9 s, 54%
  "test/e2e/album-once.test.ts", // 8 s, 33%
  "test/e2e/clients-leave.test.ts", // 7 s, 55%
  "test/inference/slot-cache.test.ts", // 7 s, 55%
  "test/slot-cache/keys-apart.test.ts", // 6 s, 56%
  "test/batches/limits.test.ts", // 5 s, 28%
  "test/inference/scheduling.test.ts", // 5 s, 44%
  "test/runtime/node-bundle.test.ts", // 5 s, 55%
  "test/models/misbehaving-upstream.test.ts", // 4 s, 32%
  "test/cli/launch-relay.test.ts", // 3 s, 18%
];

/** The waiting files in the order listed; vitest's own order (by size, or by the last run's times when it has them) would start a long one last. */
class ListedFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (file: TestSpecification) => {
      const at = WAITING.findIndex((listed) => file.moduleId.endsWith(listed));
      return at < 0 ? WAITING.length : at;
    };
    return [...(await super.sort(files))].sort((a, b) => rank(a) - rank(b));
  }
}

export default defineConfig({
  test: {
    // Tests start real servers and processes; two cores are shared by all of them.
    testTimeout: 60_000,
    hookTimeout: 180_000,
    reporters: ["default", "./test/support/summary-reporter.ts"],
    // The run's own TMPDIR; the run fails if tests leave their temporary folders there.
    globalSetup: ["./test/support/temp-guard.ts"],
    projects: [
      { extends: true, test: { name: "waiting", include: WAITING, maxWorkers: 3, sequence: { groupOrder: 0, sequencer: ListedFirst } } },
      {
        extends: true,
        test: { name: "computing", include: ["test/**/*.test.ts"], exclude: [...configDefaults.exclude, ...WAITING], maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});

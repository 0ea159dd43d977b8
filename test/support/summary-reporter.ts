import { relative } from "node:path";
import type { Reporter, TestModule } from "vitest/node";

// Ends the run with the files that took longest (where a run's time goes), then one plain line,
// `tests: N passed, N failed, N skipped`, that any CI can read.

/** How many of the slowest test files are named. */
const SLOWEST = 10;

/** A file's time: importing it and its setup, then its tests and hooks. */
function seconds(module: TestModule): number {
  const d = module.diagnostic();
  return (d.environmentSetupDuration + d.prepareDuration + d.collectDuration + d.setupDuration + d.duration) / 1000;
}

export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const count = { passed: 0, failed: 0, skipped: 0 };
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === "passed") count.passed++;
        else if (state === "failed") count.failed++;
        else count.skipped++;
      }
    }
    const slowest = [...testModules].sort((a, b) => seconds(b) - seconds(a)).slice(0, SLOWEST);
    if (slowest.length > 1) {
      console.log(`\nslowest test files:`);
      for (const module of slowest) console.log(`${seconds(module).toFixed(1).padStart(8)} s  ${relative(process.cwd(), module.moduleId)}`);
    }
    console.log(`\ntests: ${count.passed} passed, ${count.failed} failed, ${count.skipped} skipped`);
  }
}

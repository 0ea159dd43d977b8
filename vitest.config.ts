import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Tests start real servers and processes; two cores are shared by all of them.
    testTimeout: 60_000,
    hookTimeout: 180_000,
    reporters: ["default", "./test/support/summary-reporter.ts"],
    // The run's own TMPDIR; the run fails if tests leave their temporary folders there.
    globalSetup: ["./test/support/temp-guard.ts"],
  },
});

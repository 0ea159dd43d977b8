import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Tests start real servers and processes; two cores are shared by all of them.
    testTimeout: 60_000,
    hookTimeout: 180_000,
    reporters: ["default", "./test/support/summary-reporter.ts"],
  },
});

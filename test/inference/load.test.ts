import { describe, expect, it } from "vitest";
import { runLoad } from "../support/load.ts";

// B17.3: the load-and-fault run, short, under each runtime (`npm run bench:load` runs it longer and
// prints the figures). Anything a client should never see fails it.

describe.each(["bun", "node", "deno"] as const)("under load and faults, %s", (runtime) => {
  it("no hang, no non-JSON error, no truncated stream, no failure without a killed runner, nothing left behind", async () => {
    const report = await runLoad({ runtime, seconds: 6, concurrency: 24, kills: 2 });
    console.log(`${runtime}: ${JSON.stringify(report)}`);
    expect(report.problems).toEqual([]);
    expect(report.kills).toBe(2);
    expect(report.counts.ok ?? 0).toBeGreaterThan(0);
    expect(report.counts["ok (stream)"] ?? 0).toBeGreaterThan(0);
    expect(report.counts["bad input refused"] ?? 0).toBeGreaterThan(0);
  });
});

import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const NODE = join(import.meta.dirname, "../../node_modules/.bin/node");
const PENDING_TIMERS = join(import.meta.dirname, "fixtures/pending-timers.ts");

describe("SidecarProcess", () => {
  it("B14: leaves no timer pending once the process has exited and its output is drained", async () => {
    const { stdout } = await promisify(execFile)(NODE, [PENDING_TIMERS]);
    const report = JSON.parse(stdout) as { exited: string; tail: string; timers: number };
    expect(report.tail).toMatch(/^done\n--- exited: code 0\n$/);
    expect(report.timers).toBe(0);
  });
});

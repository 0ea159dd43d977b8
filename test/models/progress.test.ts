import { describe, expect, it } from "vitest";
import type { PullEvent } from "../../src/models/pull/plan.ts";
import { progressReporter } from "../../src/models/pull/progress.ts";

describe("progressReporter", () => {
  it("sends at most one line per layer every 100 ms, and always the completing one", () => {
    let now = 0;
    const events: PullEvent[] = [];
    const report = progressReporter(3_000_000, (e) => events.push(e), () => now);
    const a = { digest: "sha256:a", size: 2_000_000 };
    const b = { digest: "sha256:b", size: 1_000_000 };
    report(a, 0);
    report(a, 10);
    report(b, 5);
    now = 99;
    report(a, 500_000);
    now = 100;
    report(a, 1_000_000);
    report(a, 2_000_000, true);
    report(a, 2_000_000, true);
    expect(events.map((e) => [e.layer!.id, e.layer!.current])).toEqual([
      ["sha256:a", 0],
      ["sha256:b", 5],
      ["sha256:a", 1_000_000],
      ["sha256:a", 2_000_000],
    ]);
    expect(events.at(-1)).toEqual({
      type: "progress",
      message: "Downloaded: 2.00 MB",
      total: 3_000_000,
      layer: { id: "sha256:a", size: 2_000_000, current: 2_000_000 },
      mode: "pull",
    });
  });
});

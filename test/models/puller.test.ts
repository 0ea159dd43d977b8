import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createModelStore } from "../../src/models/index.ts";
import type { PullPlan } from "../../src/models/pull/plan.ts";
import { createPuller } from "../../src/models/pull/puller.ts";

// The puller's job sharing, over a real store in a temporary folder; the plans are made here, with
// layer sources that hold their bytes until told otherwise.

let root: string | undefined;
afterEach(async () => {
  if (root) await rm(root, { recursive: true, force: true });
  root = undefined;
});

/** A plan whose one layer sends nothing until the pull is aborted. */
function stalledPlan(key: string): PullPlan {
  return {
    key,
    id: `sha256:${"a".repeat(64)}`,
    manifest: new Uint8Array(),
    layers: [
      {
        digest: `sha256:${"b".repeat(64)}`,
        size: 10,
        source: async (_range, signal) => ({
          start: 0,
          ranged: false,
          body: new ReadableStream({
            start(controller) {
              if (signal.aborted) controller.error(signal.reason);
              else signal.addEventListener("abort", () => controller.error(signal.reason), { once: true });
            },
          }),
        }),
      },
    ],
    describe: () => Promise.reject(new Error("never reached")),
  };
}

describe("createPuller", () => {
  it("starts a new job for a pull that comes right after the last listener left (B4: it joined the cancelled job and streamed nothing)", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-puller-"));
    const puller = createPuller(createModelStore(root));
    const first = await puller.start("ai/tiny:latest", async () => stalledPlan("ai/tiny:latest"));
    const leave = first.listen(() => {});
    leave();

    const planned: string[] = [];
    const second = puller.start("ai/tiny:latest", async () => {
      planned.push("second");
      throw new Error("the second plan failed");
    });
    await expect(second).rejects.toThrow("the second plan failed");
    expect(planned).toEqual(["second"]);
    await first.done;
  });

  it("still joins a running job while it has a listener", async () => {
    root = await mkdtemp(join(tmpdir(), "llamadock-puller-"));
    const puller = createPuller(createModelStore(root));
    const first = await puller.start("ai/tiny:latest", async () => stalledPlan("ai/tiny:latest"));
    const leave = first.listen(() => {});
    const second = await puller.start("ai/tiny:latest", () => Promise.reject(new Error("not planned twice")));
    expect(second).toBe(first);
    leave();
    await first.done;
  });
});

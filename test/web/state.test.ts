import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { latestLog } from "../../src/inference/logs.ts";
import { unloadsAt } from "../../src/web/state.ts";

// The live state's pure parts, and which log file is a model's latest.

describe("unloadsAt", () => {
  const idle = { state: "ready" as const, inUse: 0, waiting: 0, lastUsed: 1_000, keepAlive: "5m" };
  it.each([
    ["idle: last use plus keep-alive", idle, 301_000],
    ["in use", { ...idle, inUse: 1 }, null],
    ["requests waiting", { ...idle, waiting: 2 }, null],
    ["loading", { ...idle, state: "loading" as const }, null],
    ["kept forever", { ...idle, keepAlive: "-1" }, null],
    ["unloaded at once", { ...idle, keepAlive: "0" }, 1_000],
    ["1h30m", { ...idle, keepAlive: "1h30m" }, 5_401_000],
  ])("%s", (_, runner, at) => expect(unloadsAt(runner)).toBe(at));
});

describe("latestLog", () => {
  it("the highest serial of the model's runners in that mode; none before one ran", async () => {
    const dir = await mkdtemp(join(tmpdir(), "llamadock-logs-"));
    try {
      const id = "sha256:0123456789abcdef";
      expect(await latestLog(dir, id, "completion")).toBeUndefined();
      for (const name of ["0123456789ab-completion-2.log", "0123456789ab-completion-10.log", "0123456789ab-completion-10.log.1", "0123456789ab-embedding-11.log", "ffffffffffff-completion-12.log"]) {
        await writeFile(join(dir, name), "x");
      }
      expect(await latestLog(dir, id, "completion")).toBe(join(dir, "0123456789ab-completion-10.log"));
      expect(await latestLog(dir, id, "embedding")).toBe(join(dir, "0123456789ab-embedding-11.log"));
      expect(await latestLog(join(dir, "absent"), id, "completion")).toBeUndefined();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

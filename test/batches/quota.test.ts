import { describe, expect, it } from "vitest";
import { inTurn } from "../../src/batches/in-turn.ts";
import { heldBy, overQuota } from "../../src/batches/quota.ts";
import type { FileRecord } from "../../src/batches/files.ts";

// The quota's policy alone (pure functions), and the per-key turns that make its check and the
// change it gates one step.

const record = (owner: string, bytes: number): FileRecord => ({ id: `file-${owner}-${bytes}`, object: "file", bytes, created_at: 0, filename: "f", purpose: "batch", owner });

describe("the per-key file quota", () => {
  it("counts an owner's files and bytes, and no one else's", () => {
    expect(heldBy([record("a", 10), record("b", 5), record("a", 7)], "a")).toEqual({ files: 2, bytes: 17 });
    expect(heldBy([], "a")).toEqual({ files: 0, bytes: 0 });
  });

  it("refuses past either bound (reaching it is allowed); 0 is no bound", () => {
    const limits = { keyMaxFiles: 3, keyMaxBytes: 100 };
    expect(overQuota("a", { files: 3, bytes: 100 }, limits)).toBeUndefined();
    expect(overQuota("a", { files: 4, bytes: 1 }, limits)).toMatchObject({ status: 429, code: "quota_exceeded", type: "rate_limit_error" });
    expect(overQuota("a", { files: 1, bytes: 101 }, limits)?.message).toContain("KEY_MAX_FILE_BYTES");
    expect(overQuota("a", { files: 4, bytes: 1 }, limits)?.message).toContain("KEY_MAX_FILES");
    expect(overQuota("a", { files: 10 ** 6, bytes: 2 ** 50 }, { keyMaxFiles: 0, keyMaxBytes: 0 })).toBeUndefined();
    expect(overQuota("a", { files: 4, bytes: 1 }, limits, { connection: "close" })?.headers).toEqual({ connection: "close", "x-should-retry": "false" });
  });
});

describe("inTurn", () => {
  it("runs the works of one key one after another, a failed one not stopping the next; other keys meanwhile", async () => {
    const turn = inTurn();
    const log: string[] = [];
    let release!: () => void;
    const first = turn("k", () => new Promise<void>((resolve) => (release = resolve)).then(() => void log.push("k1")));
    const second = turn("k", async () => {
      log.push("k2");
      throw new Error("no");
    });
    const third = turn("k", async () => void log.push("k3"));
    await turn("other", async () => void log.push("other"));
    expect(log).toEqual(["other"]);
    release();
    await first;
    await expect(second).rejects.toThrow("no");
    await third;
    expect(log).toEqual(["other", "k1", "k2", "k3"]);
  });
});

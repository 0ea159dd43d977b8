import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it, vi } from "vitest";
import { keptIn, newBatch, RECORD_LIMIT } from "../../src/batches/record.ts";

// The batches kept on disk, read at start: a file that is not a record is left out and named,
// and the others load (one unreadable file stopped every batch from loading).

let dir: string | undefined;
afterEach(async () => {
  vi.restoreAllMocks();
  if (dir) await rm(dir, { recursive: true, force: true });
});

it("loads the records it can read, oldest first, and names each file it cannot", async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-records-"));
  const fields = { input_file_id: "file-1", endpoint: "/v1/chat/completions" as const, completion_window: "24h", metadata: null };
  const older = newBatch("key-a", fields, 1_000_000);
  const newer = newBatch("key-b", fields, 2_000_000);
  await writeFile(join(dir, `${newer.id}.json`), JSON.stringify(newer));
  await writeFile(join(dir, `${older.id}.json`), JSON.stringify(older));
  await writeFile(join(dir, "batch_cut.json"), JSON.stringify(older).slice(0, 40));
  await writeFile(join(dir, "batch_other.json"), JSON.stringify({ id: 7, status: "completed" }));
  // A record grown past RECORD_LIMIT (by hand: ours stay far under it) is not read whole, but left out.
  const grown = { ...newBatch("key-c", fields, 1_500_000), metadata: { padding: "x".repeat(RECORD_LIMIT) } };
  await writeFile(join(dir, "batch_grown.json"), JSON.stringify(grown));
  const said = vi.spyOn(console, "error").mockImplementation(() => {});
  expect((await keptIn(dir)).map((batch) => batch.id)).toEqual([older.id, newer.id]);
  const named = said.mock.calls.map(([line]) => String(line));
  expect(named).toHaveLength(3);
  expect(named.some((line) => line.includes("batch_cut.json"))).toBe(true);
  expect(named.some((line) => line.includes("batch_other.json"))).toBe(true);
  expect(named.some((line) => line.includes("batch_grown.json"))).toBe(true);
});

import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openLedger, totals } from "../../src/inference/usage/ledger.ts";

/** The settings' defaults (USAGE_MAX_ROWS, USAGE_KEEP_DAYS). */
const LEDGER_BOUNDS = { maxRows: 20_000, keepDays: 400 };
import { tokenCounts } from "../../src/inference/usage/tokens.ts";

// The usage file: counts per day, key and model, written whole under a temporary name and renamed.

const folders: string[] = [];
/** A new temporary folder, removed after the test. */
function folder(): string {
  const dir = mkdtempSync(join(tmpdir(), "llamadock-ledger-"));
  folders.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of folders.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("the ledger", () => {
  it("adds per day, key and model; writes on flush; reads back", async () => {
    const dir = folder();
    const path = join(dir, "usage.json");
    let day = new Date("2026-01-01T23:59:00Z");
    const ledger = openLedger(path, LEDGER_BOUNDS, () => day.getTime());
    ledger.add("alice", "ai/a", { requests: 1, prompt_tokens: 5, cached_tokens: 4, completion_tokens: 3 });
    ledger.add("alice", "ai/a", { requests: 1, errors: 1 });
    day = new Date("2026-01-02T00:01:00Z");
    ledger.add("alice", "ai/a", { requests: 1, prompt_tokens: 2 });
    ledger.add("bob", "ai/b", { requests: 1 });
    await ledger.flush();
    expect(readdirSync(dir)).toEqual(["usage.json"]); // no temporary file left
    const again = openLedger(path, LEDGER_BOUNDS);
    expect(again.rows({ key: "alice" })).toEqual([
      { day: "2026-01-01", key: "alice", model: "ai/a", requests: 2, prompt_tokens: 5, cached_tokens: 4, completion_tokens: 3, errors: 1 },
      { day: "2026-01-02", key: "alice", model: "ai/a", requests: 1, prompt_tokens: 2, cached_tokens: 0, completion_tokens: 0, errors: 0 },
    ]);
    expect(again.rows({ since: "2026-01-02" }).map((r) => r.key)).toEqual(["alice", "bob"]);
    expect(totals(again.rows(), ["key"])).toEqual([
      { key: "alice", requests: 3, prompt_tokens: 7, cached_tokens: 4, completion_tokens: 3, errors: 1 },
      { key: "bob", requests: 1, prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, errors: 0 },
    ]);
  });

  it("a file written before cached tokens were counted reads them as 0", () => {
    const dir = folder();
    const path = join(dir, "usage.json");
    const old = { day: "2026-01-01", key: "alice", model: "ai/a", requests: 1, prompt_tokens: 5, completion_tokens: 3, errors: 0 };
    writeFileSync(path, JSON.stringify({ version: 1, rows: [old] }));
    expect(openLedger(path, LEDGER_BOUNDS, () => Date.parse("2026-01-01T12:00:00Z")).rows()).toEqual([{ ...old, cached_tokens: 0 }]);
  });

  it("a file it cannot read is moved aside and counting starts afresh", () => {
    const dir = folder();
    writeFileSync(join(dir, "usage.json"), "{half");
    expect(openLedger(join(dir, "usage.json"), LEDGER_BOUNDS).rows()).toEqual([]);
    expect(readFileSync(join(dir, "usage.json.unreadable"), "utf8")).toBe("{half");
  });
});

describe("the ledger's bounds", () => {
  const day = (n: number) => Date.UTC(2026, 0, n, 12);
  /** `adds`: [day of the month, key, model]; the rows left and what was dropped. */
  it.each([
    ["under both bounds: all kept", { maxRows: 10, keepDays: 30 }, [[1, "a", "m"], [2, "a", "m"], [2, "b", "m"]], ["01 a", "02 a", "02 b"], { age: 0, rows: 0 }],
    ["past maxRows: the oldest row goes first", { maxRows: 2, keepDays: 30 }, [[1, "a", "m"], [2, "a", "m"], [2, "b", "m"]], ["02 a", "02 b"], { age: 0, rows: 1 }],
    ["a row counted again is not a new row", { maxRows: 2, keepDays: 30 }, [[1, "a", "m"], [1, "b", "m"], [1, "a", "m"], [1, "b", "m"]], ["01 a", "01 b"], { age: 0, rows: 0 }],
    ["one row kept: the newest", { maxRows: 1, keepDays: 30 }, [[1, "a", "m"], [1, "b", "m"], [1, "c", "m"]], ["01 c"], { age: 0, rows: 2 }],
    ["past keepDays: a new day drops the days before the window", { maxRows: 10, keepDays: 2 }, [[1, "a", "m"], [2, "a", "m"], [3, "a", "m"]], ["02 a", "03 a"], { age: 1, rows: 0 }],
    ["keepDays 1: today only", { maxRows: 10, keepDays: 1 }, [[1, "a", "m"], [1, "b", "m"], [5, "a", "m"]], ["05 a"], { age: 2, rows: 0 }],
  ] as const)("%s", (_name, bounds, adds, left, dropped) => {
    let now = day(1);
    const ledger = openLedger(join(folder(), "usage.json"), bounds, () => now);
    for (const [n, key, model] of adds) {
      now = day(n);
      ledger.add(key, model, { requests: 1 });
    }
    expect(ledger.rows().map((r) => `${r.day.slice(8)} ${r.key}`)).toEqual(left);
    expect(ledger.dropped()).toEqual(dropped);
  });

  it("a file read at start is held to the bounds, its oldest days first, and written so", async () => {
    const path = join(folder(), "usage.json");
    const row = (d: string, key: string) => ({ day: d, key, model: "m", requests: 1, prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, errors: 0 });
    // Out of order on disk: the oldest is still the first to go.
    writeFileSync(path, JSON.stringify({ version: 1, rows: [row("2026-01-09", "c"), row("2025-01-01", "old"), row("2026-01-08", "b"), row("2026-01-07", "a")] }));
    const now = () => day(10);
    const ledger = openLedger(path, { maxRows: 3, keepDays: 30 }, now);
    expect(ledger.rows().map((r) => r.key)).toEqual(["a", "b", "c"]);
    expect(ledger.dropped()).toEqual({ age: 1, rows: 0 });
    ledger.add("d", "m", { requests: 1 });
    expect(ledger.rows().map((r) => r.key)).toEqual(["b", "c", "d"]);
    await ledger.flush();
    expect(openLedger(path, { maxRows: 3, keepDays: 30 }, now).rows().map((r) => r.key)).toEqual(["b", "c", "d"]);
    // A bound lowered since: held to at start.
    const lowered = openLedger(path, { maxRows: 1, keepDays: 30 }, now);
    expect([lowered.rows().map((r) => r.key), lowered.dropped()]).toEqual([["d"], { age: 0, rows: 2 }]);
  });
});

describe("tokens from an answer's text", () => {
  it.each([
    ["timings (chat, completions, Responses)", '{"usage":{"prompt_tokens":9},"timings":{"cache_n":4,"prompt_n":5,"predicted_n":7}}', { prompt: 9, cached: 4, completion: 7 }],
    ["OpenAI usage (embeddings)", '{"data":[],"usage":{"prompt_tokens":12,"total_tokens":12}}', { prompt: 12, cached: 0, completion: 0 }],
    ["OpenAI usage, cached apart", '{"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}', { prompt: 12, cached: 8, completion: 3 }],
    ["Responses usage, cached apart", '{"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":8},"output_tokens":3}}', { prompt: 12, cached: 8, completion: 3 }],
    ["Anthropic, cached apart", '{"usage":{"cache_read_input_tokens":3,"input_tokens":4,"output_tokens":2}}', { prompt: 7, cached: 3, completion: 2 }],
    ["an Anthropic stream: head and tail", 'data: {"type":"message_start","message":{"usage":{"cache_read_input_tokens":0,"input_tokens":6,"output_tokens":0}}}\n...\ndata: {"type":"message_delta","usage":{"output_tokens":5}}', { prompt: 6, cached: 0, completion: 5 }],
    ["nothing", "data: [DONE]", { prompt: 0, cached: 0, completion: 0 }],
  ])("%s", (_name, text, counts) => expect(tokenCounts(text)).toEqual(counts));
});

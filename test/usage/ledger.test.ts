import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { openLedger, totals } from "../../src/inference/usage/ledger.ts";
import { tokenCounts } from "../../src/inference/usage/tokens.ts";

// The usage file: counts per day, key and model, written whole under a temporary name and renamed.

describe("the ledger", () => {
  it("adds per day, key and model; writes on flush; reads back", async () => {
    const dir = mkdtempSync(join(tmpdir(), "llamadock-ledger-"));
    const path = join(dir, "usage.json");
    let day = new Date("2026-01-01T23:59:00Z");
    const ledger = openLedger(path, () => day);
    ledger.add("alice", "ai/a", { requests: 1, prompt_tokens: 5, completion_tokens: 3 });
    ledger.add("alice", "ai/a", { requests: 1, errors: 1 });
    day = new Date("2026-01-02T00:01:00Z");
    ledger.add("alice", "ai/a", { requests: 1, prompt_tokens: 2 });
    ledger.add("bob", "ai/b", { requests: 1 });
    await ledger.flush();
    expect(readdirSync(dir)).toEqual(["usage.json"]); // no temporary file left
    const again = openLedger(path);
    expect(again.rows({ key: "alice" })).toEqual([
      { day: "2026-01-01", key: "alice", model: "ai/a", requests: 2, prompt_tokens: 5, completion_tokens: 3, errors: 1 },
      { day: "2026-01-02", key: "alice", model: "ai/a", requests: 1, prompt_tokens: 2, completion_tokens: 0, errors: 0 },
    ]);
    expect(again.rows({ since: "2026-01-02" }).map((r) => r.key)).toEqual(["alice", "bob"]);
    expect(totals(again.rows(), ["key"])).toEqual([
      { key: "alice", requests: 3, prompt_tokens: 7, completion_tokens: 3, errors: 1 },
      { key: "bob", requests: 1, prompt_tokens: 0, completion_tokens: 0, errors: 0 },
    ]);
  });

  it("a file it cannot read is moved aside and counting starts afresh", () => {
    const dir = mkdtempSync(join(tmpdir(), "llamadock-ledger-"));
    writeFileSync(join(dir, "usage.json"), "{half");
    expect(openLedger(join(dir, "usage.json")).rows()).toEqual([]);
    expect(readFileSync(join(dir, "usage.json.unreadable"), "utf8")).toBe("{half");
  });
});

describe("tokens from an answer's text", () => {
  it.each([
    ["timings (chat, completions, Responses)", '{"usage":{"prompt_tokens":9},"timings":{"cache_n":4,"prompt_n":5,"predicted_n":7}}', { prompt: 9, completion: 7 }],
    ["OpenAI usage (embeddings)", '{"data":[],"usage":{"prompt_tokens":12,"total_tokens":12}}', { prompt: 12, completion: 0 }],
    ["Anthropic, cached apart", '{"usage":{"cache_read_input_tokens":3,"input_tokens":4,"output_tokens":2}}', { prompt: 7, completion: 2 }],
    ["an Anthropic stream: head and tail", 'data: {"type":"message_start","message":{"usage":{"cache_read_input_tokens":0,"input_tokens":6,"output_tokens":0}}}\n...\ndata: {"type":"message_delta","usage":{"output_tokens":5}}', { prompt: 6, completion: 5 }],
    ["nothing", "data: [DONE]", { prompt: 0, completion: 0 }],
  ])("%s", (_name, text, counts) => expect(tokenCounts(text)).toEqual(counts));
});

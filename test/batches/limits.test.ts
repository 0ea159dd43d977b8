import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRunnerService } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import type { Registry } from "../support/registry.ts";
import type { ServerProcess } from "../support/server-process.ts";
import { until } from "../support/until.ts";

// What one key can do to the others with batches, through the server as users run it (no model:
// lines name one that is not there, so each ends at once with a 404 through the real inference
// path, and its result goes to the batch's error file): its batches' results held to its file
// quota, its batch creations to its request limits, a batch's metadata bounded, and its finished
// batches kept for a while and up to a number. (Batches held while another key's run: batches.test.ts.)

const KIB = 1024;
const QUOTA = { files: 4, bytes: 256 * KIB };
const KEPT = 3;
const KEYS = { repro: "sk-limits-repro-4f1a", paced: "sk-limits-paced-9c20", meta: "sk-limits-meta-17be", keeper: "sk-limits-keeper-d3c5", late: "sk-limits-late-60a8", expiring: "sk-limits-expiring-2b7e" };
const RPM = 3;

let dir: string;
let server: ServerProcess;
let url: string;
const registry = { host: "127.0.0.1:9" } as Registry; // no model is pulled
const settings = () => ({
  API_KEYS_FILE: join(dir, "keys"),
  KEY_MAX_FILES: String(QUOTA.files),
  KEY_MAX_FILE_BYTES: "256KiB",
  BATCHES_KEPT_PER_KEY: String(KEPT),
});
const start = async (env: Record<string, string> = {}) => {
  server = await startRunnerService("bun", dir, registry, { ...settings(), ...env });
  url = /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
};
const client = (key: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-batch-limits-"));
  await writeFile(join(dir, "keys"), `${KEYS.repro} name=repro\n${KEYS.paced} name=paced rpm=${RPM}\n${KEYS.meta} name=meta\n${KEYS.keeper} name=keeper\n${KEYS.late} name=late\n${KEYS.expiring} name=expiring\n`);
  await start();
});
afterAll(async () => {
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const missingLine = (i: number) => ({ custom_id: `r${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "ai/absent", messages: [{ role: "user", content: `hello ${i}` }], max_tokens: 8 } });
const jsonl = (lines: object[]) => lines.map((l) => JSON.stringify(l)).join("\n") + "\n";
const upload = async (key: string, text: string) => (await client(key).files.create({ file: await toFile(Buffer.from(text), "input.jsonl"), purpose: "batch" })).id;
/** An input that fails validation: its batch ends at once, with no output or error file. */
const invalidInput = '{"custom_id":"x","method":"GET","url":"/v1/chat/completions","body":{}}\n';

const createBatch = (key: string, body: object) => ask({ url }, "POST", "/v1/batches", { endpoint: "/v1/chat/completions", completion_window: "24h", ...body }, { authorization: `Bearer ${key}` });

const finished = (b: OpenAI.Batch) => ["completed", "failed", "cancelled", "expired"].includes(b.status);
async function ended(key: string, id: string): Promise<OpenAI.Batch> {
  let batch: OpenAI.Batch | undefined;
  await until(async () => finished((batch = await client(key).batches.retrieve(id))), `batch ${id} to end`);
  return batch!;
}

/** The key's files as its listing shows them: how many, and their bytes. */
async function holding(key: string) {
  const files = (await client(key).files.list()).data;
  return { files: files.length, bytes: files.reduce((sum, f) => sum + f.bytes, 0) };
}
/** Results files left in the batches' folder (a batch's become its output and error files as it ends). */
const resultsLeft = async () => (await readdir(join(dir, "batches", "batches"))).filter((n) => n.endsWith(".jsonl"));

describe("a key's batches and its file quota", () => {
  it("the issue's reproduction: one 400-line input, 30 batches one after another; the key never holds more than its quota", async () => {
    const input = await upload(KEYS.repro, jsonl(Array.from({ length: 400 }, (_, i) => missingLine(i))));
    const outcomes: string[] = [];
    const failures: OpenAI.Batch[] = [];
    for (let i = 0; i < 30; i++) {
      const answer = await createBatch(KEYS.repro, { input_file_id: input });
      if (answer.status !== 200) {
        expect(answer.json()).toEqual({ error: { message: expect.stringMatching(/KEY_MAX_FILE/), type: "rate_limit_error", code: "quota_exceeded" } });
        expect(answer.headers["x-should-retry"]).toBe("false");
        outcomes.push("refused");
        continue;
      }
      const batch = await ended(KEYS.repro, answer.json().id);
      outcomes.push(batch.status);
      if (batch.status === "failed") failures.push(batch);
      const held = await holding(KEYS.repro);
      expect(held.files).toBeLessThanOrEqual(QUOTA.files);
      expect(held.bytes).toBeLessThanOrEqual(QUOTA.bytes);
    }
    console.log(`30 batches on one input: ${JSON.stringify(outcomes.reduce<Record<string, number>>((n, o) => ({ ...n, [o]: (n[o] ?? 0) + 1 }), {}))}, holding ${JSON.stringify(await holding(KEYS.repro))}`);
    // The first runs whole; a later one outgrows the quota midway and stops there, failed, with
    // what it wrote kept; then the key has no room for another.
    expect(outcomes[0]).toBe("completed");
    expect(outcomes.filter((o) => o === "refused").length).toBeGreaterThanOrEqual(25);
    expect(outcomes.slice(-5)).toEqual(Array(5).fill("refused"));
    const [stopped] = failures;
    expect(stopped?.errors?.data).toEqual([{ code: "quota_exceeded", message: expect.stringContaining("KEY_MAX_FILE_BYTES"), line: null }]);
    expect(stopped!.request_counts!.failed).toBeGreaterThan(0);
    expect(stopped!.request_counts!.failed).toBeLessThan(400);
    const kept = await client(KEYS.repro).files.retrieve(stopped!.error_file_id!);
    const text = await (await client(KEYS.repro).files.content(kept.id)).text();
    expect(Buffer.byteLength(text)).toBe(kept.bytes);
    expect(text.split("\n").filter(Boolean)).toHaveLength(stopped!.request_counts!.failed);
    expect(await resultsLeft()).toEqual([]);
    // Room again once the key deletes a file.
    await client(KEYS.repro).files.delete(kept.id);
    const again = await createBatch(KEYS.repro, { input_file_id: input });
    expect(again.status).toBe(200);
    await ended(KEYS.repro, again.json().id);
    const held = await holding(KEYS.repro);
    expect([held.files <= QUOTA.files, held.bytes <= QUOTA.bytes]).toEqual([true, true]);
  });

  it("two batches asked for at once cannot both take the last room", async () => {
    // 100 KiB of input: room for the input and its size once more, not twice more.
    const lines = Array.from({ length: 400 }, (_, i) => missingLine(i)).map((l) => ({ ...l, body: { ...l.body, messages: [{ role: "user", content: "x".repeat(100) }] } }));
    const text = jsonl(lines).slice(0, 100 * KIB);
    const input = await upload(KEYS.late, text.slice(0, text.lastIndexOf("\n") + 1));
    const answers = await Promise.all([1, 2].map(() => createBatch(KEYS.late, { input_file_id: input })));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 429]);
    await ended(KEYS.late, answers.find((a) => a.status === 200)!.json().id);
    const held = await holding(KEYS.late);
    expect([held.files <= QUOTA.files, held.bytes <= QUOTA.bytes]).toEqual([true, true]);
  });
});

describe("batch creation and the key's request limits", () => {
  it(`a key with rpm=${RPM} gets 429 rate_limit_exceeded for its ${RPM + 1}th batch within the minute, with Retry-After`, async () => {
    const input = await upload(KEYS.paced, invalidInput);
    for (let i = 0; i < RPM; i++) {
      const answer = await createBatch(KEYS.paced, { input_file_id: input });
      expect(answer.status).toBe(200);
      expect(answer.headers["x-ratelimit-limit-requests"]).toBe(String(RPM));
      await ended(KEYS.paced, answer.json().id);
    }
    const refused = await createBatch(KEYS.paced, { input_file_id: input });
    expect([refused.status, refused.json().error.type, refused.json().error.code]).toEqual([429, "rate_limit_error", "rate_limit_exceeded"]);
    expect(Number(refused.headers["retry-after"])).toBeGreaterThan(0);
    expect((await client(KEYS.paced).batches.list()).data).toHaveLength(RPM);
  });
});

describe("a batch's metadata", () => {
  const pairs = (n: number, key = (i: number) => `k${i}`, value = () => "v") => Object.fromEntries(Array.from({ length: n }, (_, i) => [key(i), value()]));

  it("is bounded as OpenAI bounds it: 16 pairs, keys of 64 characters, values of 512; past it 400", async () => {
    const input = await upload(KEYS.meta, invalidInput);
    const most = pairs(16, (i) => `${i}`.padEnd(64, "k"), () => "v".repeat(512));
    const kept = await createBatch(KEYS.meta, { input_file_id: input, metadata: most });
    expect(kept.status).toBe(200);
    expect(kept.json().metadata).toEqual(most);
    for (const [what, metadata] of [
      ["17 pairs", pairs(17)],
      ["a key of 65 characters", { ["k".repeat(65)]: "v" }],
      ["a value of 513 characters", { k: "v".repeat(513) }],
    ] as const) {
      const refused = await createBatch(KEYS.meta, { input_file_id: input, metadata });
      expect([what, refused.status, refused.json().error.type]).toEqual([what, 400, "invalid_request_error"]);
    }
    expect((await client(KEYS.meta).batches.list()).data).toHaveLength(1);
  });
});

describe("finished batches kept", () => {
  it(`a key keeps its ${KEPT} latest finished batches: an older one goes, record and all, its results files staying the key's`, async () => {
    const withResults = await upload(KEYS.keeper, jsonl([missingLine(0)]));
    const first = await ended(KEYS.keeper, (await createBatch(KEYS.keeper, { input_file_id: withResults })).json().id);
    expect(first.error_file_id).toBeTruthy();
    await client(KEYS.keeper).files.delete(withResults); // room for the batches below (each holds two files' room until it ends)
    const invalid = await upload(KEYS.keeper, invalidInput);
    const later: string[] = [];
    for (let i = 0; i < KEPT + 1; i++) {
      const answer = await createBatch(KEYS.keeper, { input_file_id: invalid });
      expect(answer.status).toBe(200);
      later.push((await ended(KEYS.keeper, answer.json().id)).id);
    }
    const listed = (await client(KEYS.keeper).batches.list()).data.map((b) => b.id);
    expect(listed.sort()).toEqual(later.slice(-KEPT).sort());
    for (const gone of [first.id, later[0]!]) {
      await expect(client(KEYS.keeper).batches.retrieve(gone)).rejects.toMatchObject({ status: 404 });
      await until(async () => !(await readdir(join(dir, "batches", "batches"))).some((n) => n.startsWith(gone)), `${gone}'s record removed from disk`);
    }
    // Its error file is the key's, under its quota, until the key deletes it.
    expect((await client(KEYS.keeper).files.retrieve(first.error_file_id!)).id).toBe(first.error_file_id);
  });

  it("a finished batch expires BATCHES_KEEP after it ended: gone from its key's answers, from memory and from disk, at start too", async () => {
    const input = await upload(KEYS.expiring, invalidInput);
    const before = (await client(KEYS.keeper).batches.list()).data.map((b) => b.id);
    expect(before.length).toBeGreaterThan(0);
    // Restarted with a short keep: the batches that ended earlier are dropped as the server starts.
    await server.stop();
    await new Promise((resolve) => setTimeout(resolve, 1100));
    await start({ BATCHES_KEEP: "1s" });
    const records = async () => (await readdir(join(dir, "batches", "batches"))).filter((n) => before.some((id) => n.startsWith(id)));
    await until(async () => (await records()).length === 0, "the expired records removed at start");
    expect((await client(KEYS.keeper).batches.list()).data).toEqual([]);
    // One that ends now is there, then goes.
    const batch = await ended(KEYS.expiring, (await createBatch(KEYS.expiring, { input_file_id: input })).json().id);
    expect((await client(KEYS.expiring).batches.list()).data.map((b) => b.id)).toEqual([batch.id]);
    await until(async () => !(await readdir(join(dir, "batches", "batches"))).some((n) => n.startsWith(batch.id)), "the record removed once expired");
    await expect(client(KEYS.expiring).batches.retrieve(batch.id)).rejects.toMatchObject({ status: 404 });
  });
});

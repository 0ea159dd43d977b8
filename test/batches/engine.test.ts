import { appendFile, mkdtemp, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createBatches, type BatchLimits, type RunLine } from "../../src/batches/batches.ts";
import type { Batch } from "../../src/batches/record.ts";
import { nextTurn } from "../../src/batches/turns.ts";
import { createFileStore, type FileStore } from "../../src/batches/files.ts";
import { createQuota } from "../../src/batches/quota.ts";
import { ERRORS_LISTED, MAX_REQUESTS } from "../../src/batches/lines.ts";
import { HttpError } from "../../src/http/errors.ts";
import { until as waitFor } from "../support/until.ts";

// The batch engine in-process, on a real file store in a temporary folder, its lines run by a
// small scripted RunLine: which batches run when, what a restart resumes, what happens when the
// disk holds less than the records say. (Lines through real runners: batches.test.ts.)

let dir: string;
const engines: { stop(graceMs: number): Promise<void> }[] = [];
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-batches-"));
});
afterEach(async () => {
  try {
    await Promise.all(engines.splice(0).map((e) => e.stop(0)));
  } finally {
    // A batch may still be writing as its engine stops without grace: retried until it is done.
    await rm(dir, { recursive: true, force: true, maxRetries: 5 });
  }
});

/** An engine on the folder's store; no quota unless given. */
function open(run: RunLine, limits: Partial<BatchLimits> = {}, quotaLimits = { keyMaxFiles: 0, keyMaxBytes: 0 }) {
  const files = createFileStore(join(dir, "files"));
  const quota = createQuota(files, quotaLimits);
  const batches = createBatches(join(dir, "batches"), files, run, { perKey: 0, running: 2, maxLineBytes: 1 << 20, keepMs: 3600_000, keptPerKey: 0, ...limits }, quota);
  engines.push(batches);
  return { files, batches, quota };
}

const line = (id: string) => ({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model: "m" } });

async function upload(files: FileStore, text: string, owner = "alice") {
  const path = join(dir, `upload-${Math.random()}`);
  await writeFile(path, text);
  return files.adopt(path, { filename: "in.jsonl", purpose: "batch", owner });
}
const inputOf = (ids: string[]) => ids.map((id) => JSON.stringify(line(id))).join("\n") + "\n";

async function create(engine: ReturnType<typeof open>, ids: string[], owner = "alice") {
  const file = await upload(engine.files, inputOf(ids), owner);
  return engine.batches.create(owner, { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: null }, file);
}

/** Polls the batch (every 10 ms, bounded) until `done` holds. */
async function until(engine: ReturnType<typeof open>, id: string, done: (b: Batch) => boolean, what: string): Promise<Batch> {
  for (let i = 0; i < 1000; i++) {
    const batch = await engine.batches.get(id);
    if (batch && done(batch)) return structuredClone(batch);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`batch ${id}: no ${what} within the bound`);
}
const ended = (b: Batch) => ["completed", "failed", "cancelled", "expired"].includes(b.status);

/** Lines answered 200 after a few milliseconds, each start and end logged by custom_id. */
function answering(log: string[] = []): RunLine {
  return async (l) => {
    log.push(`start ${l.custom_id}`);
    await new Promise((resolve) => setTimeout(resolve, 3));
    log.push(`end ${l.custom_id}`);
    return { status: 200, body: { ok: l.custom_id } };
  };
}
/** Lines that never end (as when the process stops under them): nothing is written for them. */
const hanging: RunLine = () => new Promise(() => {});

const results = async (path: string) => (await readFile(path, "utf8")).split("\n").filter(Boolean).map((l) => JSON.parse(l) as { custom_id: string });

describe("batches run a few at a time", () => {
  it("at start, the unfinished batches resume BATCHES_RUNNING at a time, oldest first, and new ones queue behind", async () => {
    const first = open(hanging, { running: 1 });
    const made: Batch[] = [];
    for (const b of ["b0", "b1", "b2", "b3"]) made.push(await create(first, [`${b}-0`, `${b}-1`, `${b}-2`]));
    await until(first, made[0]!.id, (b) => b.status === "in_progress", "start");
    expect((await first.batches.get(made[3]!.id))!.status).toBe("validating"); // waiting its turn
    await first.batches.stop(0);

    const log: string[] = [];
    const second = open(answering(log), { running: 2 });
    const late = await create(second, ["b4-0", "b4-1"]);
    for (const b of [...made, late]) expect((await until(second, b.id, ended, "end")).status).toBe("completed");

    // Batches with a line in flight, after each event: never more than two, and two at some point.
    const inFlight = new Map<string, number>();
    const together: number[] = [];
    for (const event of log) {
      const [what, id] = event.split(" ") as [string, string];
      const batch = id.split("-")[0]!;
      inFlight.set(batch, (inFlight.get(batch) ?? 0) + (what === "start" ? 1 : -1));
      together.push([...inFlight.values()].filter((n) => n > 0).length);
    }
    expect(Math.max(...together)).toBe(2);
    const firstStarts = [...new Set(log.filter((e) => e.startsWith("start")).map((e) => e.split(" ")[1]!.split("-")[0]))];
    // Turns go oldest first; within a pair given turns a moment apart, the later may start its first
    // line first (its input checked sooner), so the order is held pair by pair (a full run saw b3 before b2).
    const pairs = [firstStarts.slice(0, 2).sort(), firstStarts.slice(2, 4).sort(), firstStarts.slice(4)];
    expect(pairs).toEqual([["b0", "b1"], ["b2", "b3"], ["b4"]]);
  });

  it("a turn that frees goes to the oldest batch of the key with the fewest running", () => {
    const waiting = (...owners: string[]) => owners.map((owner) => ({ owner }));
    expect(nextTurn(waiting("a", "b"), [])).toBe(0);
    expect(nextTurn(waiting("a", "a", "b"), ["a"])).toBe(2);
    expect(nextTurn(waiting("a", "b", "c"), ["a", "b"])).toBe(2);
    expect(nextTurn(waiting("a", "b", "b"), ["a", "a", "b"])).toBe(1);
    expect(nextTurn(waiting("a"), ["a", "a"])).toBe(0);
  });

  it("one key's many batches do not keep another key's waiting until they have all ended", async () => {
    const log: string[] = [];
    let release!: () => void;
    const created = new Promise<void>((resolve) => (release = resolve));
    const answer = answering(log);
    const engine = open(async (l, owner, signal) => (await created, answer(l, owner, signal)), { running: 2 });
    const made = [];
    for (const b of ["a0", "a1", "a2", "a3"]) made.push(await create(engine, [`${b}-0`, `${b}-1`, `${b}-2`], "alice"));
    made.push(await create(engine, ["b0-0"], "bob"));
    release();
    for (const b of made) await until(engine, b.id, ended, "end");
    const firstStarts = [...new Set(log.filter((e) => e.startsWith("start")).map((e) => e.split(" ")[1]!.split("-")[0]))];
    expect(firstStarts.indexOf("b0")).toBeLessThan(firstStarts.indexOf("a3"));
  });

  it("a key past BATCHES_PER_KEY batches not yet ended gets 429 quota_exceeded; another key does not; one ended frees a place", async () => {
    const engine = open(hanging, { perKey: 2, running: 1 });
    const a = await create(engine, ["a"]);
    await create(engine, ["b"]);
    const refused = await create(engine, ["c"]).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(HttpError);
    expect(refused).toMatchObject({ status: 429, type: "rate_limit_error", code: "quota_exceeded" });
    await create(engine, ["x"], "bob");
    await engine.batches.cancel((await engine.batches.get(a.id))!);
    // The line running under a cancel ends only as the engine stops; the waiting one ends at once.
    const list = await engine.batches.list();
    const waiting = list.find((b) => b.owner === "alice" && b.id !== a.id)!;
    await engine.batches.cancel(waiting);
    expect((await until(engine, waiting.id, ended, "end")).status).toBe("cancelled");
    await create(engine, ["d"]);
  });
});

describe("what a restart finds on disk", () => {
  /** A batch that ran `answered` of its lines, then its engine stopped with the rest in flight. */
  async function stoppedAfter(ids: string[], answered: number) {
    let calls = 0;
    const run: RunLine = (l, owner, signal) => (++calls <= answered ? answering()(l, owner, signal) : hanging(l, owner, signal));
    const first = open(run, { running: 1 });
    const batch = await create(first, ids);
    await until(first, batch.id, (b) => b.request_counts.completed === answered, `${answered} lines`);
    await first.batches.stop(0);
    return batch;
  }

  it("a results file whose last line was cut short: the line is cut off and its request runs again, each result once", async () => {
    const ids = ["c0", "c1", "c2", "c3"];
    const batch = await stoppedAfter(ids, 2);
    const output = join(dir, "batches", `${batch.id}.output.jsonl`);
    await appendFile(output, '{"id":"batch_req_x","custom_id":"c2","respon');
    const log: string[] = [];
    const second = open(answering(log));
    const done = await until(second, batch.id, ended, "end");
    expect(done).toMatchObject({ status: "completed", request_counts: { total: 4, completed: 4, failed: 0 } });
    expect(log.filter((e) => e.startsWith("start")).sort()).toEqual(["start c2", "start c3"]);
    const file = second.files.dataPath(done.output_file_id!);
    expect((await results(file)).map((r) => r.custom_id).sort()).toEqual(ids);
  });

  it("an input deleted before the batch reads it again: the batch fails with input_file_missing, keeping the results it has", async () => {
    const batch = await stoppedAfter(["g0", "g1", "g2"], 1);
    const files = createFileStore(join(dir, "files"));
    await files.remove(batch.input_file_id);
    const second = open(answering());
    const failed = await until(second, batch.id, ended, "end");
    expect(failed.status).toBe("failed");
    expect(failed.errors?.data).toEqual([{ code: "input_file_missing", message: expect.stringContaining(batch.input_file_id), line: null }]);
    expect((await results(second.files.dataPath(failed.output_file_id!))).map((r) => r.custom_id)).toEqual(["g0"]);
  });

  it("an input whose bytes are gone but whose record is left, and one gone while waiting its turn: both fail", async () => {
    const engine = open(hanging, { running: 1 });
    const first = await create(engine, ["first"]); // takes the only turn, for ever
    const waiting = await create(engine, ["w"]);
    await unlink(engine.files.dataPath(waiting.input_file_id));
    await engine.batches.stop(0);
    const second = open(answering(), { running: 2 });
    expect((await until(second, waiting.id, ended, "end")).errors?.data[0]?.code).toBe("input_file_missing");
    expect((await until(second, first.id, ended, "end")).status).toBe("completed");
  });

  it("a batch whose 24 h passed while it waited its turn ends expired without reading its input", async () => {
    const engine = open(hanging, { running: 1 });
    const first = await create(engine, ["first"]);
    const late = await create(engine, ["l0", "l1"]);
    await engine.batches.stop(0);
    const record = join(dir, "batches", `${late.id}.json`);
    await writeFile(record, JSON.stringify({ ...JSON.parse(await readFile(record, "utf8")), expires_at: Math.floor(Date.now() / 1000) - 1 }));
    await unlink(engine.files.dataPath(late.input_file_id)); // not read: no input_file_missing
    const second = open(answering(), { running: 2 });
    expect(await until(second, late.id, ended, "end")).toMatchObject({ status: "expired", errors: null, output_file_id: null });
    await until(second, first.id, ended, "end");
  });

  it("an input deleted while its lines run: the batch still ends (the lines already open are read to the end)", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const run: RunLine = async (l) => (await gate, { status: 200, body: { ok: l.custom_id } });
    const engine = open(run);
    const batch = await create(engine, ["r0", "r1", "r2", "r3", "r4"]);
    await until(engine, batch.id, (b) => b.status === "in_progress", "start");
    await engine.files.remove(batch.input_file_id);
    release();
    expect(ended(await until(engine, batch.id, ended, "end"))).toBe(true);
  });
});

describe("validation keeps only what it must", () => {
  it("lists the first errors and counts the others", async () => {
    const engine = open(answering());
    const file = await upload(engine.files, "not json\n".repeat(ERRORS_LISTED + 50));
    const batch = await engine.batches.create("alice", { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: null }, file);
    const failed = await until(engine, batch.id, ended, "end");
    expect(failed.status).toBe("failed");
    expect(failed.errors!.data).toHaveLength(ERRORS_LISTED + 1);
    expect(failed.errors!.data.at(-1)).toEqual({ code: "too_many_errors", message: "50 more errors not listed", line: null });
  });

  it("names a custom_id used twice cut to 200 characters (the batch's record, errors and all, is read back whole)", async () => {
    const engine = open(answering());
    const id = "d".repeat(5000);
    const twice = await create(engine, [id, id]);
    const [error] = (await until(engine, twice.id, ended, "end")).errors!.data;
    expect(error).toEqual({ code: "invalid_request", message: `custom_id ${"d".repeat(200)}… is used twice`, line: 2 });
  });

  it(`refuses more than ${MAX_REQUESTS} requests, and a line past the body limit`, async () => {
    const engine = open(answering(), { maxLineBytes: 200 });
    const many = await create(engine, Array.from({ length: MAX_REQUESTS + 1 }, (_, i) => `m${i}`));
    expect((await until(engine, many.id, ended, "end")).errors!.data).toEqual([{ code: "too_many_requests", message: `a batch may hold ${MAX_REQUESTS} requests`, line: MAX_REQUESTS + 1 }]);
    const file = await upload(engine.files, `${JSON.stringify(line("ok"))}\n${JSON.stringify({ ...line("long"), body: { text: "x".repeat(300) } })}\n`);
    const long = await engine.batches.create("alice", { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: null }, file);
    expect((await until(engine, long.id, ended, "end")).errors!.data.map((e) => [e.code, e.line])).toEqual([["line_too_long", 2]]);
  });
});

describe("a batch's room on its key's file quota", () => {
  /** Lines answered 200 with a body of `bytes` characters. */
  const answeringWith = (bytes: number): RunLine => async (l) => ({ status: 200, body: { ok: l.custom_id, text: "x".repeat(bytes) } });

  it("is held from its creation to its end, waiting its turn too: its input's size again and two files; a batch without room is refused, another key's is not", async () => {
    const input = inputOf(["a0", "a1"]);
    const size = Buffer.byteLength(input);
    const engine = open(hanging, { running: 1 }, { keyMaxFiles: 10, keyMaxBytes: 3 * size - 1 });
    await create(engine, ["bob-0"], "bob"); // takes the only turn, for ever
    const file = await upload(engine.files, input);
    const waiting = await engine.batches.create("alice", { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: null }, file);
    expect(engine.quota.holding("alice")).toEqual({ files: 2, bytes: size });
    const refused = await engine.batches.create("alice", { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: null }, file).catch((error: unknown) => error);
    expect(refused).toMatchObject({ status: 429, type: "rate_limit_error", code: "quota_exceeded", headers: { "x-should-retry": "false" } });
    expect((refused as Error).message).toContain("KEY_MAX_FILE_BYTES");
    expect((await engine.batches.list()).filter((b) => b.owner === "alice")).toHaveLength(1);
    // Ended, it holds nothing more; room again.
    await engine.batches.cancel(waiting);
    await until(engine, waiting.id, ended, "end");
    expect(engine.quota.holding("alice")).toEqual({ files: 0, bytes: 0 });
    await engine.batches.create("alice", { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: null }, file);
    // Another key's room is its own.
    const bobs = await upload(engine.files, inputOf(["b0"]), "bob");
    await engine.batches.create("bob", { input_file_id: bobs.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: null }, bobs);
  });

  it("results that outgrow the quota stop where the next would cross it: the batch fails (quota_exceeded) with what it wrote, never past the quota", async () => {
    const ids = Array.from({ length: 20 }, (_, i) => `q${i}`);
    const size = Buffer.byteLength(inputOf(ids));
    const limit = size + 2000; // the input, and 2000 bytes of results: four or so of the lines' 400
    const engine = open(answeringWith(300), {}, { keyMaxFiles: 10, keyMaxBytes: limit });
    const batch = await create(engine, ids);
    const failed = await until(engine, batch.id, ended, "end");
    expect(failed.status).toBe("failed");
    expect(failed.errors?.data).toEqual([{ code: "quota_exceeded", message: expect.stringContaining("KEY_MAX_FILE_BYTES"), line: null }]);
    const written = await results(engine.files.dataPath(failed.output_file_id!));
    expect(written.length).toBe(failed.request_counts.completed);
    expect(written.length).toBeGreaterThan(2);
    expect(written.length).toBeLessThan(ids.length);
    const held = await engine.quota.held("alice");
    expect(held.bytes).toBeLessThanOrEqual(limit);
    expect(limit - held.bytes).toBeLessThan(500); // it stopped at the first result that did not fit
    expect(engine.quota.holding("alice")).toEqual({ files: 0, bytes: 0 });
  });

  it("is taken again at a restart by the batches resumed, with what their results already hold", async () => {
    let calls = 0;
    const first = open((l, owner, signal) => (++calls <= 2 ? answeringWith(500)(l, owner, signal) : hanging(l, owner, signal)), { running: 1 });
    const batch = await create(first, ["r0", "r1", "r2"]);
    await until(first, batch.id, (b) => b.request_counts.completed === 2, "two lines");
    await first.batches.stop(0);
    const written = (await readFile(join(dir, "batches", `${batch.id}.output.jsonl`))).length;
    const second = open(hanging, { running: 1 }, { keyMaxFiles: 10, keyMaxBytes: 10 * written });
    await second.batches.list(); // read back
    expect(second.quota.holding("alice").files).toBe(2);
    expect(written).toBeGreaterThan((await second.files.get(batch.input_file_id))!.bytes); // its results, more than its input
    await waitFor(() => second.quota.holding("alice").bytes === written, "its results counted as it resumes");
    expect(second.quota.holding("alice")).toEqual({ files: 2, bytes: written });
  });
});

describe("ended batches kept", () => {
  it("a key keeps its latest ended, by when they ended: one that ran long and ended last is kept, the first to end goes", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const engine = open(async (l) => (l.custom_id.startsWith("slow") ? await gate : undefined, { status: 200, body: {} }), { keptPerKey: 2 });
    const slow = await create(engine, ["slow-0"]);
    const quick = [];
    for (const id of ["q0", "q1"]) quick.push(await until(engine, (await create(engine, [id])).id, ended, "end"));
    release();
    await until(engine, slow.id, ended, "end");
    expect((await engine.batches.list()).map((b) => b.id).sort()).toEqual([slow.id, quick[1]!.id].sort());
    expect(await engine.batches.get(quick[0]!.id)).toBeUndefined();
    // Its record goes from disk; its output file stays the key's.
    await expect(readFile(join(dir, "batches", `${quick[0]!.id}.json`))).rejects.toMatchObject({ code: "ENOENT" });
    expect(await engine.files.get(quick[0]!.output_file_id!)).toMatchObject({ owner: "alice", purpose: "batch_output" });
  });
});

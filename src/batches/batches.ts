import { randomBytes } from "node:crypto";
import { Buffer } from "node:buffer";
import { stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../models/store/files.ts";
import type { FileRecord, FileStore } from "./files.ts";
import { pastKeeping, type Keeping } from "./keep.ts";
import { admitBatch, QuotaReached, type Quota, type ResultsRoom } from "./quota.ts";
import { createTurns } from "./turns.ts";
import { append, checkInput, doneIn, InputGone, pendingLines, resultLine, type InputLine, type ResultLine } from "./lines.ts";
import { createdMs, FINISHED, keptIn, newBatch, type Batch, type BatchFields, type BatchStatus } from "./record.ts";

// OpenAI's Batch API: a batch's lines run in the background, a few at a time, each as a request of
// its owner's key in the runners' batch lane (served only while no interactive request waits, and
// never taking a runner's last free slot). Its record (`<id>.json`) is rewritten at each change of
// status; each line's result is appended as it ends, so a restart resumes with the lines that have
// none. A stop waits for the lines running (up to the shutdown grace), so none is cut short and run
// again. A few batches run at once (`limits.running`, created and resumed alike), the others wait
// their turn (turns.ts): a server restarted with many unfinished batches does not take them all up
// together, and what batches cost at once (their reads of the input, their sets of custom_ids) is
// bounded.
//
// What a batch writes is held to its key's file quota (quota.ts): it is created only with room for
// its output and error files and its input's size again, holds that room until it ends, and its
// results take more room as they need it; a result that finds none is not written, and the batch
// ends `failed` (quota_exceeded) with the results it has. An ended batch's record is kept for a
// while, and a key keeps its latest so many (keep.ts): older ones go, from memory and disk (their
// output and error files stay the key's, on its quota, until it deletes them).

/** Runs one line for `owner`: the status and JSON body of its answer. */
export type RunLine = (line: InputLine, owner: string, signal: AbortSignal) => Promise<{ status: number; body: unknown }>;

export type BatchLimits = {
  /** Batches of one key not yet ended (0: no bound); one more is refused with 429. */
  perKey: number;
  /** Batches running at once; the others wait their turn (turns.ts). */
  running: number;
  /** The longest input line read (longer ones fail validation): the inference body limit. */
  maxLineBytes: number;
} & Keeping;

/** Lines of one batch running at once: enough to fill free slots, few enough to wait politely. */
const LINES_AT_ONCE = 2;
const SAVE_EVERY_MS = 1000;
/** How often records past their keep are looked for (at most: a shorter keep, that often). */
const SWEEP_EVERY_MS = 3600_000;


/** A file's size, 0 when it is not there. */
const sizeOf = async (path: string) => (await stat(path).catch(() => undefined))?.size ?? 0;

export function createBatches(dir: string, files: FileStore, run: RunLine, limits: BatchLimits, quota: Quota) {
  const batches = new Map<string, Batch>();
  /** The room on its key's quota of each batch not yet ended (released as it ends). */
  const rooms = new Map<string, ResultsRoom>();
  const turns = createTurns<Batch>(limits.running, (batch) => work(batch).catch((error: Error) => fail(batch, error)));
  let lastCreatedMs = 0;
  /** No line starts once aborted; `cut` aborts the lines still running when the grace is over. */
  const stopping = new AbortController();
  const cut = new AbortController();
  const now = () => Math.floor(Date.now() / 1000);
  const path = (id: string, kind: "json" | "output.jsonl" | "errors.jsonl") => join(dir, `${id}.${kind}`);
  // The record is written at each change of status, and at most once a second as lines end (so
  // that its counts, shown until a resumed batch has read its results, are about right): the
  // results files are what says a line is done, and a resume takes its counts from them.
  const save = (batch: Batch) => writeFileAtomic(path(batch.id, "json"), JSON.stringify(batch), { durable: false });

  const enter = async (batch: Batch, status: BatchStatus) => {
    batch.status = status;
    const at = `${status}_at` as keyof Batch;
    if (at in batch) (batch as Record<string, unknown>)[at] = now();
    await save(batch);
  };

  /** Where the input's bytes are, checked now; a file that goes later fails the read (see `gone`). */
  async function inputOf(batch: Batch): Promise<string> {
    const found = await files.get(batch.input_file_id);
    const data = found && files.dataPath(found.id);
    if (!data || !(await stat(data).catch(() => undefined))) throw new InputGone(batch.input_file_id);
    return data;
  }
  const gone = (batch: Batch) => (error: NodeJS.ErrnoException) => Promise.reject(error.code === "ENOENT" ? new InputGone(batch.input_file_id) : error);

  /** Validates (if not yet), runs the lines without a result, then finalizes. */
  async function work(batch: Batch): Promise<void> {
    if (batch.status === "cancelling") return finalize(batch);
    if (now() > batch.expires_at) return enter(batch, "expired").then(() => finalize(batch)); // its window passed while it waited its turn
    const input = await inputOf(batch);
    if (batch.status === "validating") {
      const { requests, errors } = await checkInput(input, batch.endpoint, limits.maxLineBytes).catch(gone(batch));
      if (errors.length) {
        batch.errors = { object: "list", data: errors };
        return end(batch, "failed");
      }
      batch.request_counts.total = requests;
      // A cancel may have come while the input was read (TypeScript cannot know it changed).
      if ((batch.status as BatchStatus) === "cancelling") return finalize(batch);
      await enter(batch, "in_progress");
    }
    if (batch.status === "in_progress") await runLines(batch, input);
    if (stopping.signal.aborted) return; // resumed at the next start
    if (batch.status === "in_progress") await enter(batch, "finalizing");
    await finalize(batch);
  }

  /** The lines without a result, LINES_AT_ONCE at a time, read from the input as they start. */
  async function runLines(batch: Batch, input: string): Promise<void> {
    const output = path(batch.id, "output.jsonl");
    const failed = path(batch.id, "errors.jsonl");
    const [completed, failures] = await Promise.all([doneIn(output), doneIn(failed)]);
    batch.request_counts.completed = completed.size;
    batch.request_counts.failed = failures.size;
    const room = rooms.get(batch.id)!;
    room.found((await sizeOf(output)) + (await sizeOf(failed)));
    /** Set once a result finds no room: no line starts after it. */
    let full: QuotaReached | undefined;
    const done = { has: (id: string) => completed.has(id) || failures.has(id), size: completed.size + failures.size };
    const pending = pendingLines(input, batch.endpoint, limits.maxLineBytes, done);
    let saved = Date.now();
    const next = async () => {
      while (batch.status === "in_progress" && !stopping.signal.aborted && !full) {
        if (now() > batch.expires_at) return void (await enter(batch, "expired"));
        const { value: line, done: read } = await pending.next().catch(gone(batch));
        if (read) return;
        const result = await outcome(line, batch.owner);
        const ok = result.response !== null && result.response.status_code < 400;
        const text = resultLine(result);
        if (!(await room.take(Buffer.byteLength(text)))) {
          full ??= new QuotaReached(batch.owner, quota.limits.keyMaxBytes);
          return;
        }
        await append(ok ? output : failed, text);
        batch.request_counts[ok ? "completed" : "failed"]++;
        if (Date.now() - saved >= SAVE_EVERY_MS) {
          saved = Date.now();
          await save(batch);
        }
      }
    };
    try {
      await Promise.all(Array.from({ length: LINES_AT_ONCE }, next));
    } finally {
      await pending.return(undefined);
    }
    // Thrown once the lines running have ended (and written what fits), so that none writes after the files are handed over.
    if (full) throw full;
  }

  async function outcome(line: InputLine, owner: string): Promise<ResultLine> {
    const id = `batch_req_${randomBytes(12).toString("hex")}`;
    try {
      const { status, body } = await run(line, owner, cut.signal);
      return { id, custom_id: line.custom_id, response: { status_code: status, request_id: id, body }, error: null };
    } catch (error) {
      return { id, custom_id: line.custom_id, response: null, error: { code: "request_failed", message: (error as Error).message } };
    }
  }

  /** The results become the batch's output and error files; then its last status. */
  async function finalize(batch: Batch, status?: BatchStatus): Promise<void> {
    const adopt = async (kind: "output.jsonl" | "errors.jsonl", name: string) => {
      const meta = { filename: `${batch.id}_${name}.jsonl`, purpose: "batch_output" as const, owner: batch.owner };
      const id = `file-${batch.id}-${name}`;
      if (await files.get(id)) return id; // adopted before a restart
      return (await sizeOf(path(batch.id, kind))) > 0 ? (await files.adopt(path(batch.id, kind), meta, id)).id : null;
    };
    batch.output_file_id = await adopt("output.jsonl", "output");
    batch.error_file_id = await adopt("errors.jsonl", "errors");
    await end(batch, status ?? (batch.status === "cancelling" ? "cancelled" : batch.status === "expired" ? "expired" : "completed"));
  }

  /**
   * The batch's last status; its room on the quota is released (its results, if any, are the
   * key's files by now: counted in the store), and the key's ended batches past its bound go. In
   * one step, before the record is saved: a client told the batch ended finds its room free.
   */
  async function end(batch: Batch, status: BatchStatus): Promise<void> {
    batch.ended_ms = Date.now();
    const saved = enter(batch, status); // its status is set at once
    rooms.get(batch.id)?.release();
    rooms.delete(batch.id);
    sweep();
    await saved;
    if (!batches.has(batch.id)) forget(batch); // gone meanwhile (a keep of a few ms): not brought back by the save
  }

  /** A batch that cannot go on ends `failed`, with why and the results it has, instead of hanging. */
  async function fail(batch: Batch, error: Error): Promise<void> {
    console.error(`batch ${batch.id}: ${error.message}`);
    const code = error instanceof InputGone ? "input_file_missing" : error instanceof QuotaReached ? "quota_exceeded" : "batch_failed";
    if (stopping.signal.aborted && code === "batch_failed") return; // resumed at the next start
    batch.errors = { object: "list", data: [{ code, message: error.message, line: null }] };
    await finalize(batch, "failed").catch((cause: Error) => console.error(`batch ${batch.id}: cannot record its failure (${cause.message})`));
  }

  function start(batch: Batch): void {
    if (!FINISHED.includes(batch.status)) turns.add(batch);
  }

  /** Ended, results handed over, room released: a record that may go. */
  const over = (batch: Batch) => FINISHED.includes(batch.status) && !rooms.has(batch.id);

  /** The record goes, from memory at once and from disk (with any results file left beside it). */
  function forget(batch: Batch): void {
    batches.delete(batch.id);
    const paths = [path(batch.id, "json"), path(batch.id, "output.jsonl"), path(batch.id, "errors.jsonl")];
    void Promise.all(paths.map((p) => unlink(p).catch((error: NodeJS.ErrnoException) => error.code === "ENOENT" || console.error(`batch ${batch.id}: cannot remove ${p} (${error.message})`))));
  }

  /** Drops the ended batches past their keep, and each key's past its latest (keep.ts). */
  const sweep = () => pastKeeping([...batches.values()].filter(over), limits, Date.now()).forEach(forget);
  const sweeper = setInterval(sweep, Math.min(limits.keepMs, SWEEP_EVERY_MS));
  (sweeper as { unref?: () => void }).unref?.();

  /**
   * The batches kept, read once at start: those ended past their keep, or past their key's bound,
   * go; those not ended take their room on their key's quota again and wait their turn, oldest
   * first. Every lookup waits for it.
   */
  const loaded = (async () => {
    const kept = await keptIn(dir);
    for (const batch of kept) batches.set(batch.id, batch);
    lastCreatedMs = Math.max(0, ...kept.map(createdMs));
    for (const batch of kept.filter((b) => !FINISHED.includes(b.status))) {
      rooms.set(batch.id, quota.resultsRoom(batch.owner, (await files.get(batch.input_file_id))?.bytes ?? 0));
    }
    sweep();
    for (const batch of kept) start(batch);
  })();
  loaded.catch((error: Error) => console.error(`batches: cannot resume (${error.message})`));

  /** Creates the batch once admitted, with its room on its key's quota (in the key's turn). */
  async function admitted(owner: string, fields: BatchFields, input: Pick<FileRecord, "bytes">): Promise<Batch> {
    const open = [...batches.values()].filter((b) => b.owner === owner && !FINISHED.includes(b.status)).length;
    await admitBatch(quota, owner, { open, perKey: limits.perKey, inputBytes: input.bytes });
    // Strictly after the one before, so that two batches created in the same ms keep their order.
    lastCreatedMs = Math.max(Date.now(), lastCreatedMs + 1);
    const batch = newBatch(owner, fields, lastCreatedMs);
    batches.set(batch.id, batch);
    rooms.set(batch.id, quota.resultsRoom(owner, input.bytes));
    try {
      await save(batch);
    } catch (error) {
      batches.delete(batch.id);
      rooms.get(batch.id)?.release();
      rooms.delete(batch.id);
      throw error;
    }
    start(batch);
    return batch;
  }

  return {
    /** A new batch of `owner` reading `input` (the file `fields.input_file_id` names). */
    async create(owner: string, fields: BatchFields, input: Pick<FileRecord, "bytes">): Promise<Batch> {
      await loaded;
      // Counted and taken in one step (the key's turn on its quota): two requests at once cannot
      // both take the last place, or the last room.
      return quota.turn(owner, () => admitted(owner, fields, input));
    },
    async get(id: string) {
      await loaded;
      const batch = batches.get(id);
      if (!batch || !over(batch) || pastKeeping([batch], limits, Date.now()).length === 0) return batch;
      forget(batch); // past its keep, not yet swept
      return undefined;
    },
    async list() {
      await loaded;
      sweep();
      return [...batches.values()].sort((a, b) => b.created_at - a.created_at);
    },
    /** Lines running finish; no other starts; then the batch is `cancelled` with what it has. */
    async cancel(batch: Batch): Promise<Batch> {
      if (batch.status !== "validating" && batch.status !== "in_progress") return batch;
      await enter(batch, "cancelling");
      // One waiting its turn ends now: it only has its results to hand over. One running sees
      // the status change and stops starting lines.
      turns.now(batch);
      return batch;
    },
    /** No line starts after this; resolves once the lines running have ended, or after `graceMs`. */
    async stop(graceMs: number): Promise<void> {
      stopping.abort();
      // The read at start writes its folder (and removes expired batches): a stop right after start waits for it.
      await loaded.catch(() => {});
      clearInterval(sweeper);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
      await Promise.race([turns.close(), grace]);
      clearTimeout(timer);
      cut.abort();
    },
  };
}

export type Batches = ReturnType<typeof createBatches>;

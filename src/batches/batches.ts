import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../models/store/files.ts";
import type { FileStore } from "./files.ts";
import { append, doneIn, parseInput, type BatchEndpoint, type InputLine, type LineError, type ResultLine } from "./lines.ts";

// OpenAI's Batch API: a batch's lines run in the background, a few at a time, each as a request of
// its owner's key in the runners' batch lane (served only while no interactive request waits, and
// never taking a runner's last free slot). Its record (`<id>.json`) is rewritten at each change;
// each line's result is appended as it ends, so a restart resumes with the lines that have none.
// A stop waits for the lines running (up to the shutdown grace), so none is cut short and run again.

export type BatchStatus = "validating" | "failed" | "in_progress" | "finalizing" | "completed" | "expired" | "cancelling" | "cancelled";

export type Batch = {
  id: string;
  object: "batch";
  endpoint: BatchEndpoint;
  errors: { object: "list"; data: LineError[] } | null;
  input_file_id: string;
  completion_window: string;
  status: BatchStatus;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  in_progress_at: number | null;
  expires_at: number;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  expired_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
  request_counts: { total: number; completed: number; failed: number };
  metadata: Record<string, string> | null;
  owner: string;
};

/** Runs one line for `owner`: the status and JSON body of its answer. */
export type RunLine = (line: InputLine, owner: string, signal: AbortSignal) => Promise<{ status: number; body: unknown }>;

/** Lines of one batch running at once: enough to fill free slots, few enough to wait politely. */
const LINES_AT_ONCE = 2;
const WINDOW_S = 24 * 3600;
const FINISHED: BatchStatus[] = ["failed", "completed", "expired", "cancelled"];

export const shownBatch = ({ owner: _, ...batch }: Batch) => batch;

export function createBatches(dir: string, files: FileStore, run: RunLine) {
  const batches = new Map<string, Batch>();
  const running = new Map<string, Promise<void>>();
  /** No line starts once aborted; `cut` aborts the lines still running when the grace is over. */
  const stopping = new AbortController();
  const cut = new AbortController();
  const now = () => Math.floor(Date.now() / 1000);
  const path = (id: string, kind: "json" | "output.jsonl" | "errors.jsonl") => join(dir, `${id}.${kind}`);
  const save = (batch: Batch) => writeFileAtomic(path(batch.id, "json"), JSON.stringify(batch), { durable: false });

  const enter = async (batch: Batch, status: BatchStatus) => {
    batch.status = status;
    const at = `${status}_at` as keyof Batch;
    if (at in batch) (batch as Record<string, unknown>)[at] = now();
    await save(batch);
  };

  /** Validates (if not yet), runs the lines without a result, then finalizes. */
  async function work(batch: Batch): Promise<void> {
    const input = new TextDecoder().decode(await files.content(batch.input_file_id));
    const { lines, errors } = parseInput(input, batch.endpoint);
    if (batch.status === "validating") {
      if (errors.length) {
        batch.errors = { object: "list", data: errors };
        return enter(batch, "failed");
      }
      batch.request_counts.total = lines.length;
      await enter(batch, "in_progress");
    }
    const output = path(batch.id, "output.jsonl");
    const failed = path(batch.id, "errors.jsonl");
    const done = new Set([...(await doneIn(output)), ...(await doneIn(failed))]);
    const pending = lines.filter((l) => !done.has(l.custom_id));
    const next = async () => {
      for (let line = pending.shift(); line; line = pending.shift()) {
        if (batch.status !== "in_progress" || stopping.signal.aborted) return;
        if (now() > batch.expires_at) return void (await enter(batch, "expired"));
        const result = await outcome(line, batch.owner);
        const ok = result.response !== null && result.response.status_code < 400;
        await append(ok ? output : failed, result);
        batch.request_counts[ok ? "completed" : "failed"]++;
        await save(batch);
      }
    };
    if (batch.status === "in_progress") await Promise.all(Array.from({ length: LINES_AT_ONCE }, next));
    if (stopping.signal.aborted) return; // resumed at the next start
    if (batch.status === "in_progress") await enter(batch, "finalizing");
    await finalize(batch);
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
  async function finalize(batch: Batch): Promise<void> {
    const adopt = async (kind: "output.jsonl" | "errors.jsonl", name: string) => {
      const meta = { filename: `${batch.id}_${name}.jsonl`, purpose: "batch_output" as const, owner: batch.owner };
      const id = `file-${batch.id}-${name}`;
      if (await files.get(id)) return id; // adopted before a restart
      return (await doneIn(path(batch.id, kind))).size > 0 ? (await files.adopt(path(batch.id, kind), meta, id)).id : null;
    };
    batch.output_file_id = await adopt("output.jsonl", "output");
    batch.error_file_id = await adopt("errors.jsonl", "errors");
    await enter(batch, batch.status === "cancelling" ? "cancelled" : batch.status === "expired" ? "expired" : "completed");
  }

  function start(batch: Batch): void {
    if (FINISHED.includes(batch.status) || running.has(batch.id)) return;
    const job = work(batch)
      .catch((error: Error) => console.error(`batch ${batch.id}: ${error.message}`))
      .finally(() => running.delete(batch.id));
    running.set(batch.id, job);
  }

  /** The batches kept, read once at start (those not finished resumed); every lookup waits for it. */
  const loaded = (async () => {
    await mkdir(dir, { recursive: true });
    for (const name of (await readdir(dir)).filter((n) => n.endsWith(".json"))) {
      const batch = JSON.parse(await readFile(join(dir, name), "utf8")) as Batch;
      batches.set(batch.id, batch);
      start(batch);
    }
  })();
  loaded.catch((error: Error) => console.error(`batches: cannot resume (${error.message})`));

  return {
    async create(owner: string, fields: { input_file_id: string; endpoint: BatchEndpoint; completion_window: string; metadata: Record<string, string> | null }): Promise<Batch> {
      const created = now();
      const batch: Batch = {
        id: `batch_${randomBytes(12).toString("hex")}`,
        object: "batch",
        ...fields,
        errors: null,
        status: "validating",
        output_file_id: null,
        error_file_id: null,
        created_at: created,
        in_progress_at: null,
        expires_at: created + WINDOW_S,
        finalizing_at: null,
        completed_at: null,
        failed_at: null,
        expired_at: null,
        cancelling_at: null,
        cancelled_at: null,
        request_counts: { total: 0, completed: 0, failed: 0 },
        owner,
      };
      await loaded;
      await save(batch);
      batches.set(batch.id, batch);
      start(batch);
      return batch;
    },
    get: async (id: string) => (await loaded, batches.get(id)),
    list: async () => (await loaded, [...batches.values()].sort((a, b) => b.created_at - a.created_at)),
    /** Lines running finish; no other starts; then the batch is `cancelled` with what it has. */
    async cancel(batch: Batch): Promise<Batch> {
      if (batch.status !== "validating" && batch.status !== "in_progress") return batch;
      await enter(batch, "cancelling");
      if (!running.has(batch.id)) start(batch);
      return batch;
    },
    /** No line starts after this; resolves once the lines running have ended, or after `graceMs`. */
    async stop(graceMs: number): Promise<void> {
      stopping.abort();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
      await Promise.race([Promise.allSettled(running.values()), grace]);
      clearTimeout(timer);
      cut.abort();
    },
  };
}

export type Batches = ReturnType<typeof createBatches>;

import { open, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { badRequest, HttpError } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import type { ModelStore } from "../models/index.ts";

// A runner's log (`GET /engines/logs?model=`): the file the sidecar writes for the model's latest
// runner, `<id12>-<mode>-<serial>.log` in the log folder. It outlives the runner, so the log of
// one that failed to load can still be read. `follow=true` keeps the answer open and sends what
// is appended, as `tail -f` would, moving on to the file of the model's next runner when one starts.

export type LogDeps = {
  store: Pick<ModelStore, "resolve">;
  logDir: string;
  /** Aborts when the server begins to stop: followed logs end then, or they would hold it up. */
  ending?: AbortSignal;
};

/** The modes a runner runs in, each with its own log. */
const MODES = ["completion", "embedding", "reranking"];
/** How often a followed log is looked at again: a file is polled, which works on every runtime. */
const FOLLOW_INTERVAL_MS = 250;
/** Without follow, at most this much of the end of the log is sent. */
const DEFAULT_TAIL_BYTES = 64 * 1024;

const noLog = (model: string) =>
  new HttpError(404, "not_found_error", "log_not_found", `no runner log for ${model} yet: it is written once the model is loaded (llamadock run ${model})`);

/** The newest log of the model's runners in `mode`: the highest serial wins. */
export async function latestLog(logDir: string, modelId: string, mode: string): Promise<string | undefined> {
  const prefix = `${modelId.replace(/^sha256:/, "").slice(0, 12)}-${mode}-`;
  const names = await readdir(logDir).catch(() => [] as string[]);
  const serials = names
    .map((name) => (name.startsWith(prefix) && name.endsWith(".log") ? Number(name.slice(prefix.length, -4)) : NaN))
    .filter((n) => Number.isInteger(n));
  if (serials.length === 0) return undefined;
  return join(logDir, `${prefix}${Math.max(...serials)}.log`);
}

async function readRange(path: string, from: number, to: number): Promise<Uint8Array<ArrayBuffer>> {
  const handle = await open(path, "r");
  try {
    const buffer = new Uint8Array(Math.max(0, to - from));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, from);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** The log from `start`, then what is appended, until the client leaves. */
function followStream(find: () => Promise<string | undefined>, first: string, start: number, signal: AbortSignal): ReadableStream<Uint8Array> {
  let path = first;
  let offset = start;
  let inode: number | undefined;
  let stopped = false;
  const sleep = () => new Promise((resolve) => setTimeout(resolve, FOLLOW_INTERVAL_MS));
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      while (!stopped && !signal.aborted) {
        const info = await stat(path).catch(() => undefined);
        // A rolled-over or truncated file starts again from its beginning.
        if (info && (info.ino !== (inode ??= info.ino) || info.size < offset)) {
          inode = info.ino;
          offset = 0;
        }
        // A log pruned between the look and the read is gone: the model's newest is looked for below.
        const chunk = info && info.size > offset ? await readRange(path, offset, info.size).catch(() => undefined) : undefined;
        if (chunk?.length) {
          offset += chunk.length;
          return controller.enqueue(chunk);
        }
        const newest = await find();
        if (newest && newest !== path) {
          path = newest;
          offset = 0;
          inode = undefined;
          continue;
        }
        await sleep();
      }
      // Cancelled: the client left, and closing is not ours any more (it would throw).
      if (!stopped) controller.close();
    },
    cancel() {
      stopped = true;
    },
  });
}

export function logRoutes(deps: LogDeps): Route[] {
  async function logs(request: Request): Promise<Response> {
    const query = new URL(request.url).searchParams;
    const name = query.get("model");
    if (!name) throw badRequest("missing_model", "the query parameter model is required");
    const mode = query.get("mode") ?? "completion";
    if (!MODES.includes(mode)) throw badRequest("invalid_mode", 'mode must be "completion", "embedding" or "reranking"');
    const model = await deps.store.resolve(name);
    if (!model) throw new HttpError(404, "not_found_error", "model_not_found", `model not found: ${name} (llamadock pull ${name})`);
    const find = () => latestLog(deps.logDir, model.id, mode);
    const path = await find();
    // Pruned between the listing and here: as if it were not there yet (a new runner wrote a newer one).
    const size = path ? (await stat(path).catch(() => undefined))?.size : undefined;
    if (!path || size === undefined) throw noLog(name);
    const tail = Number(query.get("tail") ?? DEFAULT_TAIL_BYTES);
    if (!Number.isInteger(tail) || tail < 0) throw badRequest("invalid_tail", "tail must be a whole number of bytes");
    const start = Math.max(0, size - tail);
    const headers = { "content-type": "text/plain; charset=utf-8", "cache-control": "no-cache" };
    const signal = deps.ending ? AbortSignal.any([request.signal, deps.ending]) : request.signal;
    if (query.get("follow") === "true") return new Response(followStream(find, path, start, signal), { headers });
    return new Response(await readRange(path, start, size), { headers });
  }
  return [{ method: "GET", path: "/engines/logs", handle: logs }];
}

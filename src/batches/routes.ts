import type { IRequest } from "itty-router";
import { badRequest, HttpError } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import { readJson } from "../http/body.ts";
import * as z from "zod";
import type { Caller } from "../keys/keyring.ts";
import type { Limiter } from "../keys/limits.ts";
import type { Batches } from "./batches.ts";
import { shownBatch, type Batch } from "./record.ts";
import { shown, type FileRecord, type FileStore } from "./files.ts";
import { inTurn } from "./in-turn.ts";
import type { FileLimits, Quota } from "./quota.ts";
import { uploadHandler } from "./upload.ts";
import { BATCH_ENDPOINTS } from "./lines.ts";

// OpenAI's Files (`purpose: "batch"`) and Batch API, under every base path clients use. A key sees
// its own files and batches (any other's are 404, as if they did not exist); an admin key, the
// Unix socket, and everyone where no keys are asked see all. A batch's creation is a request of
// its key, held to its request limits (keys/limits.ts) as an inference request is.

const BASES = ["/v1", "/engines/v1", "/engines/llama.cpp/v1"];
/** A batch in these still reads its input file. */
const UNFINISHED: Batch["status"][] = ["validating", "in_progress", "finalizing", "cancelling"];

/** OpenAI's bounds on metadata: it is kept in the batch's record, rewritten and read back whole. */
const METADATA = { pairs: 16, keyChars: 64, valueChars: 512 };
const Metadata = z
  .record(z.string().max(METADATA.keyChars, `a metadata key may hold ${METADATA.keyChars} characters`), z.string().max(METADATA.valueChars, `a metadata value may hold ${METADATA.valueChars} characters`))
  .refine((m) => Object.keys(m).length <= METADATA.pairs, `metadata may hold ${METADATA.pairs} pairs`);

const CreateBatch = z.object({
  input_file_id: z.string({ error: "input_file_id is required" }).min(1),
  endpoint: z.enum(BATCH_ENDPOINTS, { error: `endpoint must be one of ${BATCH_ENDPOINTS.join(", ")}` }),
  completion_window: z.literal("24h", { error: 'completion_window must be "24h"' }),
  metadata: Metadata.nullish(),
});

export type BatchRouteDeps = {
  files: FileStore;
  batches: Batches;
  quota: Quota;
  limits: FileLimits;
  identify: (request: Request) => Caller;
  /** Each key's request limits, which a batch's creation counts against (none: not limited). */
  limiter?: Limiter;
};

export function batchRoutes({ files, batches, quota, limits, identify, limiter }: BatchRouteDeps): Route[] {
  const upload = uploadHandler(files, quota, limits, identify);
  // A file's delete and a batch's creation on it, each a check and a change, in turn per file.
  const turn = inTurn();
  const mine = (request: Request, owner: string) => {
    const caller = identify(request);
    return caller.admin || caller.name === owner;
  };
  const gone = (id: string) => new HttpError(404, "not_found_error", "file_not_found", `no file with id "${id}"`);
  const file = async (request: IRequest): Promise<FileRecord> => {
    const found = await files.get(String(request.params.id));
    if (!found || !mine(request, found.owner)) throw gone(String(request.params.id));
    return found;
  };
  const batch = async (request: IRequest): Promise<Batch> => {
    const found = await batches.get(String(request.params.id));
    if (!found || !mine(request, found.owner)) throw new HttpError(404, "not_found_error", "batch_not_found", `no batch with id "${String(request.params.id)}"`);
    return found;
  };

  /** Counted against the key's request limits first (a refusal's 429 says when to come back), then the batch's bounds (batches.ts). */
  async function create(request: Request): Promise<Response> {
    const caller = identify(request);
    const admitted = limiter?.admit(caller);
    try {
      const body = await readJson(request, 64 * 1024, CreateBatch);
      const made = await turn(body.input_file_id, async () => {
        const input = await files.get(body.input_file_id);
        if (!input || !mine(request, input.owner)) throw gone(body.input_file_id);
        if (input.purpose !== "batch") throw badRequest("invalid_input_file", "the input file's purpose must be batch");
        return batches.create(caller.name, { ...body, metadata: body.metadata ?? null }, input);
      });
      return Response.json(shownBatch(made), { headers: admitted?.headers ?? {} });
    } finally {
      admitted?.done(0);
    }
  }

  /** Streamed from disk; a file deleted since it was looked up is 404 too. */
  async function download(request: IRequest): Promise<Response> {
    const found = await file(request);
    const body = await files.stream(found.id).catch((error: NodeJS.ErrnoException) => Promise.reject(error.code === "ENOENT" ? gone(found.id) : error));
    return new Response(body, { headers: { "content-type": "application/jsonl", "content-length": String(found.bytes) } });
  }

  /** Refused while a batch not yet ended reads the file as its input (409, naming it). */
  async function remove(request: IRequest): Promise<Response> {
    const found = await file(request);
    await turn(found.id, async () => {
      if (!(await files.get(found.id))) throw gone(found.id); // deleted meanwhile
      const user = (await batches.list()).find((b) => b.input_file_id === found.id && UNFINISHED.includes(b.status));
      if (user) throw new HttpError(409, "conflict_error", "file_in_use", `file ${found.id} is the input of batch ${user.id} (${user.status}): cancel the batch, or wait for it to end, before deleting the file`);
      await files.remove(found.id);
    });
    return Response.json({ id: found.id, object: "file", deleted: true });
  }

  const list = <T extends { id: string }>(data: T[]) => Response.json({ object: "list", data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: false });

  return BASES.flatMap((base): Route[] => [
    { method: "POST", path: `${base}/files`, handle: upload },
    { method: "GET", path: `${base}/files`, handle: async (request) => list((await files.list()).filter((f) => mine(request, f.owner)).map(shown)) },
    { method: "GET", path: `${base}/files/:id`, handle: async (request) => Response.json(shown(await file(request))) },
    { method: "GET", path: `${base}/files/:id/content`, handle: download },
    { method: "DELETE", path: `${base}/files/:id`, handle: remove },
    { method: "POST", path: `${base}/batches`, handle: create },
    { method: "GET", path: `${base}/batches`, handle: async (request) => list((await batches.list()).filter((b) => mine(request, b.owner)).map(shownBatch)) },
    { method: "GET", path: `${base}/batches/:id`, handle: async (request) => Response.json(shownBatch(await batch(request))) },
    { method: "POST", path: `${base}/batches/:id/cancel`, handle: async (request) => Response.json(shownBatch(await batches.cancel(await batch(request)))) },
  ]);
}

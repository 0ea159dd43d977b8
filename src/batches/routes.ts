import type { IRequest } from "itty-router";
import { badRequest, HttpError } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import { readJson } from "../http/body.ts";
import * as z from "zod";
import type { Caller } from "../keys/keyring.ts";
import { shownBatch, type Batch, type Batches } from "./batches.ts";
import { shown, type FileRecord, type FileStore } from "./files.ts";
import { BATCH_ENDPOINTS } from "./lines.ts";

// OpenAI's Files (`purpose: "batch"`) and Batch API, under every base path clients use. A key sees
// its own files and batches (any other's are 404, as if they did not exist); an admin key, the
// Unix socket, and everyone where no keys are asked see all.

const BASES = ["/v1", "/engines/v1", "/engines/llama.cpp/v1"];
/** The largest input file: OpenAI's own bound on a batch's file. */
const FILE_MAX_BYTES = 200 * 1024 * 1024;

const CreateBatch = z.object({
  input_file_id: z.string({ error: "input_file_id is required" }).min(1),
  endpoint: z.enum(BATCH_ENDPOINTS, { error: `endpoint must be one of ${BATCH_ENDPOINTS.join(", ")}` }),
  completion_window: z.literal("24h", { error: 'completion_window must be "24h"' }),
  metadata: z.record(z.string(), z.string()).nullish(),
});

export function batchRoutes(files: FileStore, batches: Batches, identify: (request: Request) => Caller): Route[] {
  const mine = (request: Request, owner: string) => {
    const caller = identify(request);
    return caller.admin || caller.name === owner;
  };
  const file = async (request: IRequest): Promise<FileRecord> => {
    const found = await files.get(String(request.params.id));
    if (!found || !mine(request, found.owner)) throw new HttpError(404, "not_found_error", "file_not_found", `no file with id "${String(request.params.id)}"`);
    return found;
  };
  const batch = async (request: IRequest): Promise<Batch> => {
    const found = await batches.get(String(request.params.id));
    if (!found || !mine(request, found.owner)) throw new HttpError(404, "not_found_error", "batch_not_found", `no batch with id "${String(request.params.id)}"`);
    return found;
  };

  async function upload(request: Request): Promise<Response> {
    if (Number(request.headers.get("content-length") ?? 0) > FILE_MAX_BYTES) throw new HttpError(413, "payload_too_large_error", "file_too_large", `a file may hold ${FILE_MAX_BYTES} bytes`);
    let form: FormData;
    try {
      form = await request.formData();
    } catch {
      throw badRequest("invalid_form", "expected multipart/form-data with purpose and file");
    }
    const purpose = form.get("purpose");
    const part = form.get("file");
    if (purpose !== "batch") throw badRequest("invalid_purpose", 'purpose must be "batch" (the only use of files here)');
    if (!part || typeof part === "string") throw badRequest("invalid_file", "file is required");
    const data = new Uint8Array(await part.arrayBuffer());
    const created = await files.create(data, { filename: part.name || "upload.jsonl", purpose: "batch", owner: identify(request).name });
    return Response.json(shown(created));
  }

  async function create(request: Request): Promise<Response> {
    const body = await readJson(request, 64 * 1024, CreateBatch);
    const input = await files.get(body.input_file_id);
    if (!input || !mine(request, input.owner)) throw new HttpError(404, "not_found_error", "file_not_found", `no file with id "${body.input_file_id}"`);
    if (input.purpose !== "batch") throw badRequest("invalid_input_file", "the input file's purpose must be batch");
    const made = await batches.create(identify(request).name, { ...body, metadata: body.metadata ?? null });
    return Response.json(shownBatch(made));
  }

  const list = <T extends { id: string }>(data: T[]) => Response.json({ object: "list", data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: false });

  return BASES.flatMap((base): Route[] => [
    { method: "POST", path: `${base}/files`, handle: upload },
    { method: "GET", path: `${base}/files`, handle: async (request) => list((await files.list()).filter((f) => mine(request, f.owner)).map(shown)) },
    { method: "GET", path: `${base}/files/:id`, handle: async (request) => Response.json(shown(await file(request))) },
    {
      method: "GET",
      path: `${base}/files/:id/content`,
      handle: async (request) => new Response(await files.content((await file(request)).id), { headers: { "content-type": "application/jsonl" } }),
    },
    {
      method: "DELETE",
      path: `${base}/files/:id`,
      async handle(request) {
        const found = await file(request);
        await files.remove(found.id);
        return Response.json({ id: found.id, object: "file", deleted: true });
      },
    },
    { method: "POST", path: `${base}/batches`, handle: create },
    { method: "GET", path: `${base}/batches`, handle: async (request) => list((await batches.list()).filter((b) => mine(request, b.owner)).map(shownBatch)) },
    { method: "GET", path: `${base}/batches/:id`, handle: async (request) => Response.json(shownBatch(await batch(request))) },
    { method: "POST", path: `${base}/batches/:id/cancel`, handle: async (request) => Response.json(shownBatch(await batches.cancel(await batch(request)))) },
  ]);
}

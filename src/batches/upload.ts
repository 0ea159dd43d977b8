import { Buffer } from "node:buffer";
import { badRequest, clientGone, HttpError } from "../http/errors.ts";
import type { Caller } from "../keys/keyring.ts";
import { shown, type FileStore, type Incoming } from "./files.ts";
import { boundaryOf, MultipartError, readParts } from "./multipart.ts";
import { overQuota, plus, type FileLimits, type Quota } from "./quota.ts";

// POST /v1/files: the form streamed to disk as it arrives, held to the bytes actually received
// (a Content-Length is only believed when it refuses early: a chunked body has none, and a body
// never brings more than its length). Past the size bound or the key's quota the upload stops,
// what it wrote is removed and the answer is 413 or 429; an upload that sends nothing for
// FILE_UPLOAD_IDLE_TIMEOUT_MS is cut the same way with 408.

/** What a form may carry besides its file: the purpose field, part headers, boundaries. */
const FORM_BYTES = 64 * 1024;
const FIELD_BYTES = 1024;
/**
 * On a refusal given before the end of a body that may be endless (chunked, or silent, or longer
 * than the bound): the connection closes once it is sent, rather than the server reading and
 * discarding the rest. A body whose length is declared within the bound is read to its end and
 * discarded instead, so that a client that sends it whole before reading (most do) sees the answer.
 */
const CLOSE = { connection: "close" };

const tooLarge = (limit: number, headers: Record<string, string> = {}) =>
  new HttpError(413, "payload_too_large_error", "file_too_large", `a file may hold ${limit} bytes (FILE_MAX_BYTES)`, headers);
const tooSlow = (ms: number) => new HttpError(408, "timeout_error", "upload_timeout", `the upload sent nothing for ${ms} ms (FILE_UPLOAD_IDLE_TIMEOUT_MS)`, CLOSE);
const invalidForm = (message: string, headers: Record<string, string> = {}) => new HttpError(400, "invalid_request_error", "invalid_form", message, headers);

export function uploadHandler(files: FileStore, quota: Quota, limits: FileLimits, identify: (request: Request) => Caller) {
  return async function upload(request: Request): Promise<Response> {
    const boundary = boundaryOf(request.headers.get("content-type"));
    const declared = Number(request.headers.get("content-length") ?? NaN);
    if (declared > limits.maxBytes + FORM_BYTES) throw tooLarge(limits.maxBytes, CLOSE);
    const refusing = Number.isFinite(declared) ? {} : CLOSE;
    if (!boundary) throw invalidForm("expected multipart/form-data with purpose and file", refusing);
    const owner = identify(request).name;
    // Refused before a byte is read: no room for another file, or for the file the length declares.
    // What the key keeps on disk is looked up here and at the end; what is held for it in memory
    // (its other uploads under way, its batches not yet ended) is counted anew at each check.
    const stored = await quota.stored(owner);
    const declaredFile = { files: 1, bytes: Math.max(0, declared - FORM_BYTES) || 0 };
    const refusal = overQuota(owner, plus(plus(stored, quota.holding(owner)), declaredFile), limits, refusing);
    if (refusal) throw refusal;

    const mine = quota.hold(owner, { files: 1, bytes: 0 });
    /** The file's chunks, counted as they come and checked against the size bound and the quota. */
    async function* counted(content: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
      for await (const chunk of content) {
        mine.bytes += chunk.byteLength;
        const over = mine.bytes > limits.maxBytes ? tooLarge(limits.maxBytes, refusing) : overQuota(owner, plus(stored, quota.holding(owner)), limits, refusing);
        if (over) {
          mine.release(); // at once: the key's other uploads under way no longer count this one
          throw over;
        }
        yield chunk;
      }
    }
    let incoming: Incoming | undefined;
    try {
      const form = await readForm(request, boundary, limits, files, counted, refusing);
      incoming = form.file;
      // The form has been read whole here: the connection can serve on.
      if (form.purpose !== "batch") throw badRequest("invalid_purpose", 'purpose must be "batch" (the only use of files here)');
      if (!incoming) throw badRequest("invalid_file", "file is required");
      const whole = incoming;
      // Checked again against the store as it is now (another upload of the key may have ended
      // meanwhile), and kept in the same turn.
      const created = await quota.turn(owner, async () => {
        const over = overQuota(owner, await quota.held(owner), limits);
        if (over) throw over;
        const file = await files.adopt(whole.path, { filename: form.filename || "upload.jsonl", purpose: "batch", owner });
        mine.release(); // counted in the store from now on
        return file;
      });
      incoming = undefined;
      return Response.json(shown(created));
    } finally {
      mine.release();
      if (incoming) await files.discard(incoming);
    }
  };
}

type Counted = (content: AsyncIterable<Uint8Array>) => AsyncIterable<Uint8Array>;

/** The form's purpose and its file (received into the store, counted); its other fields are skipped. */
async function readForm(request: Request, boundary: string, limits: FileLimits, files: Pick<FileStore, "receive" | "discard">, counted: Counted, refusing: Record<string, string>) {
  let purpose: string | undefined;
  let file: Incoming | undefined;
  let filename = "";
  try {
    for await (const part of readParts(received(request, limits.idleTimeoutMs, limits.maxBytes + FORM_BYTES), boundary)) {
      if (part.name === "purpose") purpose = await fieldText(part.content, refusing);
      else if (part.name === "file" && part.filename !== undefined) {
        if (file) throw invalidForm("a form may carry one file", refusing);
        filename = part.filename;
        file = await files.receive(counted(part.content));
      }
    }
  } catch (error) {
    if (file) await files.discard(file);
    if (error instanceof MultipartError) throw invalidForm(`not a well-formed multipart/form-data body: ${error.message}`, refusing);
    throw error;
  }
  return { purpose, file, filename };
}

/** A field's text, short as fields are. */
async function fieldText(content: AsyncIterable<Uint8Array>, refusing: Record<string, string>): Promise<string> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of content) {
    size += chunk.byteLength;
    if (size > FIELD_BYTES) throw invalidForm(`a form field may hold ${FIELD_BYTES} bytes`, refusing);
    chunks.push(chunk);
  }
  return new TextDecoder().decode(Buffer.concat(chunks));
}

/**
 * The request's body as it arrives, at most `bound` bytes, each read within `idleMs`: a client
 * that stops sending is cut (408), one that goes away ends it (499).
 */
async function* received(request: Request, idleMs: number, bound: number): AsyncGenerator<Uint8Array> {
  if (!request.body) return;
  const reader = request.body.getReader();
  let size = 0;
  try {
    for (let next = await readWithin(reader, idleMs); !next.done; next = await readWithin(reader, idleMs)) {
      size += next.value.byteLength;
      if (size > bound) throw tooLarge(bound - FORM_BYTES, CLOSE);
      yield next.value;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/**
 * One read, settled by the read or by its own timer. Not a race against one promise of the
 * deadline kept for the whole body: each race leaves a reaction on that promise holding its chunk,
 * and an upload of 1 GiB kept 1 GiB in memory so.
 */
function readWithin(reader: ReadableStreamDefaultReader<Uint8Array>, idleMs: number): ReturnType<typeof reader.read> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(tooSlow(idleMs)), idleMs);
    reader.read().then(
      (result) => (clearTimeout(timer), resolve(result)),
      () => (clearTimeout(timer), reject(clientGone("the client went away during its upload"))),
    );
  });
}

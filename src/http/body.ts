import * as z from "zod";
import { badRequest, HttpError } from "./errors.ts";

// Request bodies are read whole (they are validated before anything loads) but never past a limit:
// a declared length over it is refused before reading, a streamed one as soon as it crosses it.

const tooLarge = (limit: number) =>
  new HttpError(413, "payload_too_large_error", "body_too_large", `request body larger than ${limit} bytes`);

/** A body that has not fully arrived after this long is refused (a trickled body holds a connection). */
export const BODY_READ_TIMEOUT_MS = 30_000;

const tooSlow = (ms: number) => new HttpError(408, "timeout_error", "body_timeout", `request body not received within ${ms} ms`);

export function readBody(request: Request, limit: number, timeoutMs = BODY_READ_TIMEOUT_MS): Promise<Uint8Array<ArrayBuffer>> {
  const declared = Number(request.headers.get("content-length") ?? NaN);
  if (declared > limit) return Promise.reject(tooLarge(limit));
  // A declared length within the limit bounds the body already (the server reads no more than it):
  // read whole, natively, without a stream and a reader (which cost Bun a JS stream per request,
  // the largest item in a profile under bench:inference). Settled in the read's own callbacks, not
  // raced against a promise of the deadline: under Node a race and an async frame were four
  // promises more per inference request.
  if (Number.isFinite(declared)) {
    return new Promise((resolve, reject) => {
      const read = request.arrayBuffer();
      const timer = setTimeout(() => reject(tooSlow(timeoutMs)), timeoutMs);
      read.then(
        (bytes) => (clearTimeout(timer), resolve(new Uint8Array(bytes))),
        (error: unknown) => (clearTimeout(timer), reject(error)),
      );
    });
  }
  return readStreamed(request, limit, timeoutMs);
}

/** A body of no declared length (chunked), read up to `limit` bytes and within `timeoutMs`. */
async function readStreamed(request: Request, limit: number, timeoutMs: number): Promise<Uint8Array<ArrayBuffer>> {
  if (!request.body) return new Uint8Array();
  // One timer per body, cleared as soon as it is read (a pending one per request would pile up under load).
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(tooSlow(timeoutMs)), timeoutMs)));
  try {
    const reader = request.body.getReader();
    return await readAtMost(reader, limit, () => tooLarge(limit), () => Promise.race([reader.read(), late]));
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Reads a stream whole, but never past `limit` bytes: `refuse()` is thrown as soon as it crosses
 * it. On any failure the stream is cancelled. `next` reads one chunk (a caller may race it).
 */
export async function readAtMost(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  limit: number,
  refuse: () => Error,
  next = () => reader.read(),
): Promise<Uint8Array<ArrayBuffer>> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (let chunk = await next(); !chunk.done; chunk = await next()) {
      size += chunk.value.byteLength;
      if (size > limit) throw refuse();
      chunks.push(chunk.value);
    }
  } catch (error) {
    await reader.cancel().catch(() => {});
    throw error;
  }
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

/** A body a dialect rewrote, as the bytes to send on, under the same limit as one read from a client. */
export function encodeJson(value: unknown, limit: number): Uint8Array<ArrayBuffer> {
  const bytes = new TextEncoder().encode(JSON.stringify(value));
  if (bytes.byteLength > limit) throw tooLarge(limit);
  return bytes;
}

/** One decoder for whole bodies (no `stream` option: it keeps no state between calls). */
const utf8 = new TextDecoder();

export function parseJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(utf8.decode(bytes));
  } catch {
    throw badRequest("invalid_json", "the request body is not valid JSON");
  }
}

/** The body checked against `schema`; 400 with what is wrong otherwise. */
export function validBody<T>(schema: z.ZodType<T>, body: unknown): T {
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw badRequest("invalid_request", z.prettifyError(parsed.error));
  return parsed.data;
}

/** A JSON body of at most `limit` bytes, checked against `schema`: 413, then 400. */
export const readJson = async <T>(request: Request, limit: number, schema: z.ZodType<T>): Promise<T> =>
  validBody(schema, parseJson(await readBody(request, limit)));

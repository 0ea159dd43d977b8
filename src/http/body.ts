import * as z from "zod";
import { badRequest, HttpError } from "./errors.ts";

// Request bodies are read whole (they are validated before anything loads) but never past a limit:
// a declared length over it is refused before reading, a streamed one as soon as it crosses it.

const tooLarge = (limit: number) =>
  new HttpError(413, "payload_too_large_error", "body_too_large", `request body larger than ${limit} bytes`);

/**
 * What a read of a request body fails with once the body stopped arriving for `idleMs`: the
 * runtime adapters give every body that idle deadline (HTTP_BODY_IDLE_TIMEOUT_MS, see
 * src/runtime/body-deadline.ts), so no route keeps a clock of its own for it.
 */
export const bodyStalled = (idleMs: number) =>
  new HttpError(408, "timeout_error", "body_timeout", `the request body stopped arriving for ${idleMs / 1000} s`);

export function readBody(request: Request, limit: number): Promise<Uint8Array<ArrayBuffer>> {
  const declared = Number(request.headers.get("content-length") ?? NaN);
  if (declared > limit) return Promise.reject(tooLarge(limit));
  // A declared length within the limit bounds the body already (the server reads no more than it):
  // read whole, without a reader of ours, and without an async frame (under Node a race and an
  // async frame were four promises more per inference request). As bytes, not an ArrayBuffer
  // wrapped afterwards: under node:http they are the socket's own, not copied (node-request.ts).
  if (Number.isFinite(declared)) return request.bytes();
  return readStreamed(request, limit);
}

/** A body of no declared length (chunked), read up to `limit` bytes. */
async function readStreamed(request: Request, limit: number): Promise<Uint8Array<ArrayBuffer>> {
  if (!request.body) return new Uint8Array();
  return readAtMost(request.body.getReader(), limit, () => tooLarge(limit));
}

/**
 * Reads a stream whole, but never past `limit` bytes: `refuse()` is thrown as soon as it crosses
 * it. On any failure the stream is cancelled.
 */
export async function readAtMost(reader: ReadableStreamDefaultReader<Uint8Array>, limit: number, refuse: () => Error): Promise<Uint8Array<ArrayBuffer>> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
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

/** A response's body as text, read up to `limit` bytes (`refuse()` past it); a response without one: "". */
export async function textAtMost(response: Response, limit: number, refuse: () => Error): Promise<string> {
  if (!response.body) return "";
  return utf8.decode(await readAtMost(response.body.getReader(), limit, refuse));
}

/** A body a dialect rewrote, as the bytes to send on, under the same limit as one read from a client. */
export function encodeJson(value: unknown, limit: number): Uint8Array<ArrayBuffer> {
  const bytes = encoder.encode(JSON.stringify(value)) as Uint8Array<ArrayBuffer>;
  if (bytes.byteLength > limit) throw tooLarge(limit);
  return bytes;
}

/**
 * `body`, a JSON object's bytes, with `"name":value` spliced in as its first field, instead of
 * parsed and written again (bodies of agents run to megabytes). A field of that name the body
 * already has comes later, and wins where the reader takes the last (llama-server does). Bytes
 * that are not an object are given back as they are.
 */
export function withLeadingField(body: Uint8Array<ArrayBuffer>, name: string, value: number): Uint8Array<ArrayBuffer> {
  let at = 0;
  while (at < body.length && WHITESPACE.has(body[at]!)) at++;
  if (body[at] !== OPEN_BRACE) return body;
  let next = at + 1;
  while (next < body.length && WHITESPACE.has(body[next]!)) next++;
  // Written into the new body itself: under Node each buffer of over 64 bytes costs 1-4 µs, and an
  // agent's every request to its slot comes here. The head is ASCII (our field names, a number).
  const head = `{${JSON.stringify(name)}:${value}${body[next] === CLOSE_BRACE ? "" : ","}`;
  const out = new Uint8Array(head.length + body.length - at - 1);
  if (encoder.encodeInto(head, out).written !== head.length) throw new Error(`withLeadingField: the field name ${name} is not ASCII`);
  out.set(body.subarray(at + 1), head.length);
  return out;
}

const WHITESPACE = new Set([0x20, 0x0a, 0x0d, 0x09]);
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/** One decoder for whole bodies (no `stream` option: it keeps no state between calls). */
const utf8 = new TextDecoder();
const encoder = new TextEncoder();

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

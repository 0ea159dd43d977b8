import * as z from "zod";
import { textAtMost } from "../http/body.ts";
import { HttpError } from "../http/errors.ts";
import type { Clock } from "../http/clock.ts";
import { Int64Json, parseJsonWithExactIds } from "./int64.ts";
import { validate } from "./safe-photos.generated.ts";

// The external photo service's protocol: the one GET per album, the checks on its answer, and every
// failure mapped to the status a gateway owes its caller. Plain functions: the handler makes the
// call in one async frame (each nested one cost promise hand-offs per album under load).

export type PhotoServiceDeps = {
  fetch: typeof fetch;
  /** Base URL without a trailing slash; a path prefix is kept. */
  baseUrl: string;
  timeoutMs: number;
  /** The largest answer body read, in bytes (decoded); beyond it the call is cut and answered 502. */
  maxBytes: number;
  /** Times the upstream call out. */
  clock: Clock;
};

const PhotosWithBigIds = z.array(
  z.object({
    id: Int64Json,
    title: z.string().nullable(),
    url: z.string().nullable(),
    thumbnailUrl: z.string().nullable(),
  }),
);
export type Photo = z.infer<typeof PhotosWithBigIds>[number];

// The same contract as a JSON Schema (photo-schema.ts) for the common case, every id a safe
// integer, compiled by Ajv into plain checks: a fraction of the zod parse, which was a third of our
// CPU per album under bench:album. Other bodies are read again with exact ids (bigints past 2^53,
// not JSON values) and go through zod, which also writes them back exactly.
const validSafePhotos = validate as (value: unknown) => value is SafePhoto[];
type SafePhoto = { id: number; title: string | null; url: string | null; thumbnailUrl: string | null };

/** The contract's fields only, in its order (unknown fields are dropped). */
const contractFields = (photos: SafePhoto[]): Photo[] => photos.map(({ id, title, url, thumbnailUrl }) => ({ id, title, url, thumbnailUrl }));

const gatewayError = (status: 502 | 504, code: string, message: string) =>
  new HttpError(status, status === 504 ? "timeout_error" : "upstream_error", code, message);

/** The one GET for an album's photos; no retries (the contract asks for exactly one call). */
export function requestPhotos(deps: PhotoServiceDeps, albumId: string, signal: AbortSignal): Promise<Response> {
  return deps.fetch(`${deps.baseUrl}/albums/${albumId}/photos`, {
    headers: { accept: "application/json" },
    signal,
    // Following a redirect would be a second call to the photo service; the contract allows one.
    redirect: "manual",
  });
}

/** A photo service answer that is not a 2xx: an error status is passed on as is with an empty body, anything else is a 502. */
export async function refusal(response: Response): Promise<Response> {
  await response.body?.cancel();
  if (response.status >= 400) return new Response(null, { status: response.status });
  return gatewayError(502, "upstream_unexpected_status", `photo service answered ${response.status}`).toResponse();
}

/**
 * The text of a 2xx answer, never more than `maxBytes`: a hostile or broken photo service could
 * send gigabytes. A declared length bounds the read by itself (the cheap common case: one native
 * read); a body without one, or one the runtime's fetch decodes (a gzip body of a few kilobytes can
 * inflate to gigabytes whatever its Content-Length), is counted as it streams and cut at the bound.
 * Cutting cancels the body, which closes the connection. Throws a 502 `HttpError` beyond the bound.
 */
export function photosText(response: Response, maxBytes: number): Promise<string> {
  const declared = response.headers.get("content-length");
  const length = declared === null || response.headers.has("content-encoding") ? NaN : Number(declared);
  if (length <= maxBytes) return response.text();
  if (length > maxBytes) {
    response.body?.cancel().catch(() => {});
    throw tooLarge(maxBytes);
  }
  return countedText(response, maxBytes);
}

const countedText = (response: Response, maxBytes: number): Promise<string> => textAtMost(response, maxBytes, () => tooLarge(maxBytes));


const tooLarge = (maxBytes: number) =>
  gatewayError(502, "upstream_too_large", `photo service answered with more than ${maxBytes} bytes (PHOTOS_API_MAX_BYTES)`);

/** Why a call that threw failed, as the status a gateway owes its caller. */
export function callFailure(error: unknown, call: { expired(): boolean }, clientSignal: AbortSignal, timeoutMs: number): HttpError {
  if (call.expired()) return gatewayError(504, "upstream_timeout", `photo service did not answer within ${timeoutMs} ms`);
  // The client is gone: nobody reads this answer, and it is no fault of ours worth logging.
  if (clientSignal.aborted) return new HttpError(499, "invalid_request_error", "client_closed", "client went away");
  return gatewayError(502, "upstream_unreachable", `photo service unreachable: ${describe(error)}`);
}

/** The photos of a 2xx answer's body, the contract's fields only; throws a 502 `HttpError` for anything else. */
export function parsePhotos(text: string): Photo[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw gatewayError(502, "upstream_bad_body", "photo service answered with a body that is not JSON");
  }
  if (validSafePhotos(value)) return contractFields(value);
  const photos = PhotosWithBigIds.safeParse(parseJsonWithExactIds(text));
  if (!photos.success) throw notPhotos();
  return photos.data;
}

const notPhotos = () => gatewayError(502, "upstream_bad_body", "photo service answered with something other than a JSON array of photos");

function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  return cause?.code ?? cause?.message ?? (error as Error)?.message ?? String(error);
}

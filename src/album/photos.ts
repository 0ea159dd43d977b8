import { Ajv } from "ajv";
import * as z from "zod";
import { HttpError } from "../http/errors.ts";
import { deadline, type Clock } from "./deadline.ts";
import { Int64Json, parseJsonWithExactIds } from "./int64.ts";

// The client of the external photo service: one GET per album, no retries (the contract asks for
// exactly one call), and every failure mapped to the status a gateway owes its caller.

export type PhotoServiceDeps = {
  fetch: typeof fetch;
  /** Base URL without a trailing slash; a path prefix is kept. */
  baseUrl: string;
  timeoutMs: number;
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

// The same contract as a JSON Schema, compiled once by Ajv into plain checks, for the common case:
// every id a safe integer, which JSON.parse read exactly (a literal that a double cannot hold
// rounds to 2^53 or beyond, which is past the bounds). It costs a fraction of the zod parse, which
// was a third of our CPU per album under bench:album. Other bodies are read again with exact ids
// (bigints past 2^53, not JSON values) and go through zod, which also writes them back exactly.
const nullableString = { type: ["string", "null"] };
const validSafePhotos = new Ajv().compile<SafePhoto[]>({
  type: "array",
  items: {
    type: "object",
    properties: {
      id: { type: "integer", minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
      title: nullableString,
      url: nullableString,
      thumbnailUrl: nullableString,
    },
    required: ["id", "title", "url", "thumbnailUrl"],
  },
});
type SafePhoto = { id: number; title: string | null; url: string | null; thumbnailUrl: string | null };

/** The contract's fields only, in its order (unknown fields are dropped). */
const contractFields = (photos: SafePhoto[]): Photo[] => photos.map(({ id, title, url, thumbnailUrl }) => ({ id, title, url, thumbnailUrl }));

/** An upstream error status, passed on to our caller as is, with an empty body. */
export class UpstreamStatus extends Error {
  readonly status: number;
  constructor(status: number) {
    super(`photo service answered ${status}`);
    this.status = status;
  }
}

const gatewayError = (status: 502 | 504, code: string, message: string) =>
  new HttpError(status, status === 504 ? "timeout_error" : "upstream_error", code, message);

export async function fetchAlbumPhotos(deps: PhotoServiceDeps, albumId: string, clientSignal: AbortSignal): Promise<Photo[]> {
  const call = deadline(clientSignal, deps.timeoutMs, deps.clock);
  try {
    // One async frame for the whole call: each nested one costs promise hand-offs per album.
    const response = await deps.fetch(`${deps.baseUrl}/albums/${albumId}/photos`, {
      headers: { accept: "application/json" },
      signal: call.signal,
      // Following a redirect would be a second call to the photo service; the contract allows one.
      redirect: "manual",
    });
    if (response.status >= 300) await refuse(response);
    return parsePhotos(await response.text());
  } catch (error) {
    if (error instanceof UpstreamStatus || error instanceof HttpError) throw error;
    if (call.expired()) {
      throw gatewayError(504, "upstream_timeout", `photo service did not answer within ${deps.timeoutMs} ms`);
    }
    // The client is gone: nobody reads this answer, and it is no fault of ours worth logging.
    if (clientSignal.aborted) throw new HttpError(499, "invalid_request_error", "client_closed", "client went away");
    throw gatewayError(502, "upstream_unreachable", `photo service unreachable: ${describe(error)}`);
  } finally {
    call.finish();
  }
}

/** An answer that is not a 2xx: an error status becomes `UpstreamStatus`, anything else a 502. */
async function refuse(response: Response): Promise<never> {
  await response.body?.cancel();
  if (response.status >= 400) throw new UpstreamStatus(response.status);
  throw gatewayError(502, "upstream_unexpected_status", `photo service answered ${response.status}`);
}

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

// Where a blob's bytes come from (a registry, the Hub), as the store sees it: a function that opens
// a byte range, and what a ranged answer may be trusted to hold.

/** Bytes `[start, end)` of a blob; to its last byte when `end` is absent. */
export type ByteRange = { start: number; end?: number };

export type OpenedRange = {
  body: ReadableStream<Uint8Array>;
  /** Where the body really begins: `range.start` when the range was honoured, 0 when it was ignored. */
  start: number;
  /** Whether the server answered the range (206) rather than sending the whole blob (200). */
  ranged: boolean;
};

/** Opens `range` of the blob (the whole blob for `{ start: 0 }`). */
export type BlobSource = (range: ByteRange, signal: AbortSignal) => Promise<OpenedRange>;

/** The `Range` header asking for `range`; none for the whole blob. */
export function rangeHeader(range: ByteRange): Record<string, string> {
  if (range.start === 0 && range.end === undefined) return {};
  return { range: `bytes=${range.start}-${range.end === undefined ? "" : range.end - 1}` };
}

/**
 * What an answer to `rangeHeader(range)` holds: a 206 must say (Content-Range) that it starts
 * where asked and, for a bounded range, ends there too, or it cannot be written in place; any
 * other success is the whole blob from its first byte.
 */
export function rangeAnswer(response: Response, range: ByteRange): Omit<OpenedRange, "body"> {
  if (response.status !== 206) return { start: 0, ranged: false };
  const said = response.headers.get("content-range") ?? "";
  const [, first, last] = /^bytes (\d+)-(\d+)\//.exec(said) ?? [];
  if (Number(first) !== range.start || (range.end !== undefined && Number(last) !== range.end - 1)) {
    throw new Error(`the server answered a request for ${rangeHeader(range).range} with ${said || "no Content-Range"}`);
  }
  return { start: range.start, ranged: true };
}

/** Bytes that cannot be the blob: resuming after them would only fail again, so they are dropped. */
export class CorruptBlobError extends Error {}

export class DigestMismatchError extends CorruptBlobError {
  constructor(expected: string, actual: string) {
    super(`downloaded content does not match its digest: expected ${expected}, got ${actual}`);
  }
}

import { readFile } from "node:fs/promises";
import * as z from "zod";
import { isMissing, writeFileAtomic } from "./files.ts";

// A large blob is downloaded as ranged parts, several at once. Parts are handed out in file order
// to a few streams, each taking the next part when it has finished one, so the written prefix of
// the file (what the hash can read) grows steadily instead of all parts ending together. Each
// part's progress is kept beside the partial file (`<hex>.parts`), so a pull killed in the middle
// resumes every part where its last checkpoint left it.

export type PartSettings = {
  /** Ranged requests in flight at once for one blob; 1 downloads every blob in one stream. */
  streams: number;
  /** The smallest part: a blob smaller than two of them is downloaded in one stream. */
  minBytes: number;
};

export const DEFAULT_PART_SETTINGS: PartSettings = { streams: 8, minBytes: 16 << 20 };

// Parts per stream: a few, so that the hash trails the download by a few parts only (it reads the
// file's complete prefix), yet each request is long enough that its round trip costs little.
const PARTS_PER_STREAM = 4;
// Past this a part would leave too much unhashed at the end.
const MAX_PART_BYTES = 256 << 20;

/** Bytes `[start, end)` of the blob, of which the first `done` are in the partial file. */
export type Part = { start: number; end: number; done: number };

/** The parts of a blob of `size` bytes, or undefined when it is downloaded in one stream. */
export function splitBlob(size: number, settings: PartSettings): Part[] | undefined {
  if (settings.streams < 2 || size < 2 * settings.minBytes) return undefined;
  const even = Math.ceil(size / (settings.streams * PARTS_PER_STREAM));
  const partBytes = Math.max(settings.minBytes, Math.min(MAX_PART_BYTES, even));
  const parts: Part[] = [];
  for (let start = 0; start < size; start += partBytes) parts.push({ start, end: Math.min(size, start + partBytes), done: 0 });
  return parts;
}

/** Parts as if their first `prefix` bytes were written (a partial file left by a one-stream download). */
export const withPrefix = (parts: Part[], prefix: number): Part[] =>
  parts.map((p) => ({ ...p, done: Math.min(p.end - p.start, Math.max(0, prefix - p.start)) }));

/** The length of the file's written prefix: every byte before it is in place. */
export function writtenPrefix(parts: Part[]): number {
  let prefix = 0;
  for (const part of parts) {
    prefix = part.start + part.done;
    if (part.start + part.done < part.end) break;
  }
  return prefix;
}

export const missingBytes = (parts: Part[]) => parts.reduce((sum, p) => sum + (p.end - p.start - p.done), 0);

const Progress = z.object({
  size: z.number().int().nonnegative(),
  parts: z.array(z.tuple([z.number().int().nonnegative(), z.number().int().nonnegative(), z.number().int().nonnegative()])).min(1),
});

/** Parts that tile `[0, size)` in order, each with no more done than its length. */
function isTiling(parts: Part[], size: number): boolean {
  let at = 0;
  for (const p of parts) {
    if (p.start !== at || p.end <= p.start || p.done > p.end - p.start) return false;
    at = p.end;
  }
  return at === size;
}

/** The progress recorded for a blob of `size` bytes; undefined when there is none or it does not fit (started over). */
export async function readProgress(path: string, size: number): Promise<Part[] | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if (isMissing(error)) return undefined;
    throw error;
  }
  let parsed: z.infer<typeof Progress>;
  try {
    parsed = Progress.parse(JSON.parse(text));
  } catch {
    return undefined;
  }
  const parts = parsed.parts.map(([start, end, done]) => ({ start, end, done }));
  return parsed.size === size && isTiling(parts, size) ? parts : undefined;
}

export const writeProgress = (path: string, size: number, parts: Part[]) =>
  writeFileAtomic(path, JSON.stringify({ size, parts: parts.map((p) => [p.start, p.end, p.done]) }));

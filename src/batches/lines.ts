import { createHash } from "node:crypto";
import { open, truncate } from "node:fs/promises";
import { readLines } from "./line-reader.ts";

// A batch's input lines, checked before it runs and read again as it runs, both straight from
// disk a line at a time; and its result lines, appended one by one as each request ends: a result
// line on disk is what makes its input line done, so a batch resumed after a restart runs only
// the lines without one. A batch's memory is thus a line or two and the set of its custom_ids
// (as fixed-size digests), never its files.

export type BatchEndpoint = "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings";
export const BATCH_ENDPOINTS: BatchEndpoint[] = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

export type InputLine = { custom_id: string; method: "POST"; url: BatchEndpoint; body: Record<string, unknown> };
/** OpenAI's batch error; `line` is null for an error of the whole file. */
export type LineError = { code: string; message: string; line: number | null };

/** OpenAI's result line: the response, or the error that kept the request from getting one. */
export type ResultLine = {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: unknown } | null;
  error: { code: string; message: string } | null;
};

/** Requests in one batch: OpenAI's bound, which also bounds the custom_ids a batch keeps. */
export const MAX_REQUESTS = 50_000;
/** Errors listed in a failed batch (OpenAI's list is short too); the rest are counted in one more. */
export const ERRORS_LISTED = 100;

/** A custom_id as the sets of them keep it: a digest, so that a long id costs no more than a short one. */
const idKey = (customId: string) => createHash("sha256").update(customId).digest("base64").slice(0, 22);

/** One input line, or what is wrong with it. */
export function parseLine(raw: string, endpoint: BatchEndpoint): InputLine | { code: string; message: string } {
  let parsed: Partial<InputLine>;
  try {
    parsed = JSON.parse(raw) as Partial<InputLine>;
  } catch {
    return { code: "invalid_json_line", message: "this line is not JSON" };
  }
  const problem =
    typeof parsed.custom_id !== "string" || !parsed.custom_id ? "custom_id must be a non-empty string"
    : parsed.method !== "POST" ? "method must be POST"
    : parsed.url !== endpoint ? `url must be the batch's endpoint, ${endpoint}`
    : typeof parsed.body !== "object" || parsed.body === null || Array.isArray(parsed.body) ? "body must be an object"
    : (parsed.body as { stream?: unknown }).stream === true ? "a batch request cannot stream"
    : undefined;
  return problem ? { code: "invalid_request", message: problem } : (parsed as InputLine);
}

/**
 * A custom_id as an error message names it: cut to a bound, since a line may be megabytes and the
 * batch's record (its errors with it) is rewritten and read back whole.
 */
const shortened = (id: string) => (id.length > ID_SHOWN ? `${id.slice(0, ID_SHOWN)}…` : id);
const ID_SHOWN = 200;

/**
 * The first pass over an input file: how many requests it holds, or what is wrong with it (the
 * first ERRORS_LISTED errors, and a count of the others). Keeps only those and the custom_ids seen.
 */
export async function checkInput(path: string, endpoint: BatchEndpoint, maxLineBytes: number): Promise<{ requests: number; errors: LineError[] }> {
  const errors: LineError[] = [];
  let unlisted = 0;
  const report = (error: LineError) => (errors.length < ERRORS_LISTED ? errors.push(error) : unlisted++);
  const seen = new Set<string>();
  for await (const { number: line, text } of readLines(path, maxLineBytes)) {
    if (text === null) {
      report({ code: "line_too_long", message: `a line may hold ${maxLineBytes} bytes (INFERENCE_BODY_LIMIT)`, line });
      continue;
    }
    if (!text.trim()) continue;
    const parsed = parseLine(text, endpoint);
    if (!("custom_id" in parsed)) report({ ...parsed, line });
    else if (seen.has(idKey(parsed.custom_id))) report({ code: "invalid_request", message: `custom_id ${shortened(parsed.custom_id)} is used twice`, line });
    else if (seen.size === MAX_REQUESTS) {
      report({ code: "too_many_requests", message: `a batch may hold ${MAX_REQUESTS} requests`, line });
      break;
    } else seen.add(idKey(parsed.custom_id));
  }
  if (unlisted) errors.push({ code: "too_many_errors", message: `${unlisted} more errors not listed`, line: null });
  if (seen.size === 0 && errors.length === 0) errors.push({ code: "empty_file", message: "the input file has no requests", line: null });
  return { requests: seen.size, errors };
}

/** The second pass: the input's requests whose custom_id is not `done`, read as they are asked for. */
export async function* pendingLines(path: string, endpoint: BatchEndpoint, maxLineBytes: number, done: Done): AsyncGenerator<InputLine> {
  for await (const { text } of readLines(path, maxLineBytes)) {
    if (!text?.trim()) continue;
    const line = parseLine(text, endpoint);
    if ("custom_id" in line && !done.has(line.custom_id)) yield line;
  }
}

export type Done = { has(customId: string): boolean; size: number };

/**
 * The custom_ids a results file holds, read line by line. A last line cut short (the process
 * ended while writing it) is cut off the file, so that the next line appended starts on a line of
 * its own, and its request runs again.
 */
export async function doneIn(path: string): Promise<Done> {
  const keys = new Set<string>();
  let whole = 0;
  let cut = false;
  try {
    for await (const { text, ended, end } of readLines(path)) {
      if (!ended) {
        cut = true;
        break;
      }
      whole = end;
      const customId = resultId(text!);
      if (customId !== undefined) keys.add(idKey(customId));
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { has: () => false, size: 0 };
    throw error;
  }
  if (cut) await truncate(path, whole);
  return { has: (customId) => keys.has(idKey(customId)), size: keys.size };
}

const resultId = (text: string): string | undefined => {
  try {
    return (JSON.parse(text) as ResultLine).custom_id;
  } catch {
    return undefined; // not a result of ours: its request runs again
  }
};

/** A result as its results file holds it: a line of JSON. */
export const resultLine = (result: ResultLine) => `${JSON.stringify(result)}\n`;

/** Appends one result line (see resultLine); resolves once it is written (the process may end right after). */
export async function append(path: string, line: string): Promise<void> {
  const file = await open(path, "a");
  try {
    await file.write(line);
  } finally {
    await file.close();
  }
}

/** The batch's input is not on disk any more (deleted, or its record lost): the batch fails. */
export class InputGone extends Error {
  constructor(id: string) {
    super(`the input file ${id} is gone (deleted while the batch had not read it all)`);
  }
}

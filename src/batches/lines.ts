import { open, readFile, writeFile } from "node:fs/promises";

// A batch's input lines, checked before it runs, and its result lines, appended one by one as
// each request ends: a result line on disk is what makes its input line done, so a batch resumed
// after a restart runs only the lines without one.

export type BatchEndpoint = "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings";
export const BATCH_ENDPOINTS: BatchEndpoint[] = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

export type InputLine = { custom_id: string; method: "POST"; url: BatchEndpoint; body: Record<string, unknown> };
export type LineError = { code: string; message: string; line: number };

/** OpenAI's result line: the response, or the error that kept the request from getting one. */
export type ResultLine = {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: unknown } | null;
  error: { code: string; message: string } | null;
};

/** The input file's lines, or every error found in them (OpenAI's `errors.data`). */
export function parseInput(text: string, endpoint: BatchEndpoint): { lines: InputLine[]; errors: LineError[] } {
  const lines: InputLine[] = [];
  const errors: LineError[] = [];
  const seen = new Set<string>();
  text.split("\n").forEach((raw, index) => {
    if (!raw.trim()) return;
    const line = index + 1;
    let parsed: Partial<InputLine>;
    try {
      parsed = JSON.parse(raw) as Partial<InputLine>;
    } catch {
      return void errors.push({ code: "invalid_json_line", message: "this line is not JSON", line });
    }
    const problem =
      typeof parsed.custom_id !== "string" || !parsed.custom_id ? "custom_id must be a non-empty string"
      : seen.has(parsed.custom_id) ? `custom_id ${parsed.custom_id} is used twice`
      : parsed.method !== "POST" ? "method must be POST"
      : parsed.url !== endpoint ? `url must be the batch's endpoint, ${endpoint}`
      : typeof parsed.body !== "object" || parsed.body === null || Array.isArray(parsed.body) ? "body must be an object"
      : (parsed.body as { stream?: unknown }).stream === true ? "a batch request cannot stream"
      : undefined;
    if (problem) return void errors.push({ code: "invalid_request", message: problem, line });
    seen.add(parsed.custom_id!);
    lines.push(parsed as InputLine);
  });
  if (lines.length === 0 && errors.length === 0) errors.push({ code: "empty_file", message: "the input file has no requests", line: 0 });
  return { lines, errors };
}

/**
 * The custom_ids a results file holds. A last line cut short (the process ended while writing
 * it) is dropped from the file, so that the next line appended starts on a line of its own.
 */
export async function doneIn(path: string): Promise<Set<string>> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return new Set();
    throw error;
  }
  const whole = text.endsWith("\n") ? text : text.slice(0, text.lastIndexOf("\n") + 1);
  if (whole !== text) await writeFile(path, whole);
  return new Set(whole.split("\n").filter(Boolean).map((l) => (JSON.parse(l) as ResultLine).custom_id));
}

/** Appends one result line; resolves once it is written (the process may end right after). */
export async function append(path: string, result: ResultLine): Promise<void> {
  const file = await open(path, "a");
  try {
    await file.write(`${JSON.stringify(result)}\n`);
  } finally {
    await file.close();
  }
}

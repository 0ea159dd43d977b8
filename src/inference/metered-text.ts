// What the latency and usage meters read of an answer (src/inference/latency.ts,
// src/inference/usage/): its text where llama-server puts its counts, decoded once per answer, never
// the whole of a long one. forward.ts keeps a stream's first chunk and last chunks for it.

/** How much of an answer's end is kept for its `timings` (llama-server's last event is under 1 KiB), and of a whole answer's start for an embedding's `usage`. */
export const TAIL_BYTES = 4096;

/** One decoder for whole answers (no `stream` option: it keeps no state between calls). */
const utf8 = new TextDecoder();

/**
 * What the meters read of a stream: its first chunk's start and its last chunks' end, each once. A
 * short answer's first chunk is among its last: its text is theirs, decoded once.
 */
export function meteredText(head: Uint8Array | undefined, tail: Uint8Array[], chunks: number): string {
  if (chunks <= tail.length && bytesIn(tail) <= TAIL_BYTES) return tailText(tail);
  return `${head ? utf8.decode(head) : ""}\n${tailText(tail)}`;
}

function bytesIn(chunks: Uint8Array[]): number {
  let size = 0;
  for (const chunk of chunks) size += chunk.length;
  return size;
}

/**
 * The text of the last TAIL_BYTES of `chunks` (a character cut at its start does not matter), each
 * chunk decoded by the shared decoder (a decoder made per answer was a visible item of Node's
 * profile) and the texts joined. Not the bytes joined first: under Node a new buffer of over 64
 * bytes costs 1-4 µs (its memory is allocated outside the heap, and collected apart), ten times a
 * chunk's decode; a character split between two chunks becomes two replacement characters, which
 * no meter reads.
 */
function tailText(chunks: Uint8Array[]): string {
  let text = "";
  for (const chunk of chunks) text += utf8.decode(chunk.length > TAIL_BYTES ? chunk.subarray(-TAIL_BYTES) : chunk);
  return text.length > TAIL_BYTES ? text.slice(-TAIL_BYTES) : text;
}

/** A whole answer's start and end as text: `usage` leads an embedding's answer, `timings` ends a completion's. */
export function edges(answer: Uint8Array): string {
  if (answer.length <= 2 * TAIL_BYTES) return utf8.decode(answer);
  return `${utf8.decode(answer.subarray(0, TAIL_BYTES))}\n${tailText([answer])}`;
}

import { createReadStream } from "node:fs";

// A file read line by line from disk, a chunk at a time: memory is one chunk and the line being
// gathered, whatever the file's size, and no string ever holds the whole file (V8 caps a string
// near 512 MiB). Lines are split on the byte "\n", which never occurs inside a UTF-8 character.

export type FileLine = {
  /** From 1, as editors count. */
  number: number;
  /** The line without its "\n"; null when it is longer than the bound (it is not gathered). */
  text: string | null;
  /** Whether a "\n" ended it: only a file's last line may lack one (cut short, or never ended). */
  ended: boolean;
  /** Where the line ends in the file, past its "\n": what a file cut after it keeps. */
  end: number;
};

const CHUNK_BYTES = 64 * 1024;

export async function* readLines(path: string, maxLineBytes = Number.POSITIVE_INFINITY): AsyncGenerator<FileLine> {
  const stream = createReadStream(path, { highWaterMark: CHUNK_BYTES });
  let parts: Buffer[] = [];
  let size = 0;
  let tooLong = false;
  let number = 0;
  let offset = 0;
  const gather = (piece: Buffer) => {
    offset += piece.length;
    if (tooLong || piece.length === 0) return;
    size += piece.length;
    if (size > maxLineBytes) {
      tooLong = true;
      parts = [];
    } else parts.push(piece);
  };
  const line = (ended: boolean): FileLine => {
    // A line within one chunk (most) is decoded from it without a copy first.
    const text = tooLong ? null : parts.length === 1 ? parts[0]!.toString("utf8") : Buffer.concat(parts, size).toString("utf8");
    parts = [];
    size = 0;
    tooLong = false;
    return { number: ++number, text, ended, end: offset };
  };
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      let start = 0;
      for (let newline = chunk.indexOf(10); newline !== -1; newline = chunk.indexOf(10, start)) {
        gather(chunk.subarray(start, newline));
        offset += 1; // the "\n"
        yield line(true);
        start = newline + 1;
      }
      gather(chunk.subarray(start));
    }
    if (size > 0 || tooLong) yield line(false);
  } finally {
    stream.destroy();
  }
}

import { Buffer } from "node:buffer";

// multipart/form-data (RFC 7578) read as it arrives: each part is handed on as soon as its headers
// are in, its content as a stream of chunks, so a large file goes to disk without ever being held
// whole. Written here rather than taken from a package: the well-kept web-stream parsers buffer a
// part's content in memory in their stable API, and busboy's kind want Node streams.

export class MultipartError extends Error {}

export type Part = {
  name: string;
  /** Set for a file part (possibly empty), absent for a plain field. */
  filename: string | undefined;
  /** The part's content: read it to its end, or leave it (the next part skips what is left). */
  content: AsyncIterable<Uint8Array>;
};

/** A part's headers may take this much; past it the form is refused (they are held in memory). */
const MAX_HEADER_BYTES = 16 * 1024;
const CRLF = Buffer.from("\r\n");
const HEADERS_END = Buffer.from("\r\n\r\n");

/** The boundary of a `multipart/form-data` Content-Type, or undefined if it is not one. */
export function boundaryOf(contentType: string | null): string | undefined {
  if (!contentType || !/^multipart\/form-data\s*(;|$)/i.test(contentType)) return undefined;
  const match = /;\s*boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))/i.exec(contentType);
  return match?.[1] ?? match?.[2];
}

/**
 * The parts of a form whose bytes come from `body`. Parts come one at a time: a part's content is
 * read (or skipped) before the next part is looked for. Throws MultipartError for a form that is
 * not well formed, including one that ends before its closing boundary.
 */
export async function* readParts(body: AsyncIterable<Uint8Array>, boundary: string): AsyncGenerator<Part> {
  const source = body[Symbol.asyncIterator]();
  // A CRLF ahead of the body makes its first boundary line look like every other delimiter.
  let buffer: Buffer = Buffer.from(CRLF);
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  const more = async (): Promise<void> => {
    const next = await source.next();
    if (next.done) throw new MultipartError("the form ends before its closing boundary");
    const chunk = Buffer.from(next.value.buffer, next.value.byteOffset, next.value.byteLength);
    buffer = buffer.length ? Buffer.concat([buffer, chunk]) : chunk;
  };
  /** Hands on the bytes up to the next delimiter and steps past it (a delimiter's prefix at the end is kept for the next chunk). */
  async function* untilDelimiter(): AsyncGenerator<Uint8Array> {
    for (;;) {
      const at = buffer.indexOf(delimiter);
      if (at >= 0) {
        const before = buffer.subarray(0, at);
        buffer = buffer.subarray(at + delimiter.length);
        if (before.length) yield before;
        return;
      }
      const safe = buffer.length - (delimiter.length - 1);
      if (safe > 0) {
        const out = buffer.subarray(0, safe);
        buffer = buffer.subarray(safe);
        yield out;
      }
      await more();
    }
  }

  try {
    await skip(untilDelimiter()); // the preamble, if any
    for (;;) {
      while (buffer.length < 2) await more();
      if (buffer[0] === DASH && buffer[1] === DASH) return; // the closing boundary; the epilogue is not read
      const part = partOf(await headerBlock());
      let ended = false;
      const content = (async function* () {
        yield* untilDelimiter();
        ended = true;
      })();
      yield { ...part, content };
      if (!ended) await skip(content); // what its reader left
    }
  } finally {
    // Left early (a bound crossed, a bad form): the body's reader is let go of.
    await source.return?.();
  }

  /** The text of a part's headers, from after its boundary line's CRLF to the blank line. */
  async function headerBlock(): Promise<string> {
    for (;;) {
      // A boundary line may carry spaces before its CRLF (RFC 2046's transport padding).
      const lineEnd = buffer.indexOf(CRLF);
      const end = buffer.indexOf(HEADERS_END);
      if (lineEnd >= 0 && end >= 0) {
        if (buffer.subarray(0, lineEnd).some((byte) => byte !== SPACE && byte !== TAB)) throw new MultipartError("a boundary line carries more than the boundary");
        // A part with no headers: the boundary line's CRLF is the first half of the blank line.
        const text = end >= lineEnd + CRLF.length ? buffer.subarray(lineEnd + CRLF.length, end).toString("utf8") : "";
        buffer = buffer.subarray(end + HEADERS_END.length);
        return text;
      }
      if (buffer.length > MAX_HEADER_BYTES) throw new MultipartError(`a part's headers take more than ${MAX_HEADER_BYTES} bytes`);
      await more();
    }
  }
}

async function skip(chunks: AsyncIterable<Uint8Array>): Promise<void> {
  for await (const chunk of chunks) void chunk;
}

const DASH = 0x2d;
const SPACE = 0x20;
const TAB = 0x09;

/** A part's name and filename, from its Content-Disposition header. */
function partOf(headers: string): Pick<Part, "name" | "filename"> {
  const disposition = headers.split("\r\n").find((line) => /^content-disposition\s*:/i.test(line));
  if (!disposition || !/:\s*form-data\s*(;|$)/i.test(disposition)) throw new MultipartError("a part has no Content-Disposition: form-data");
  const params = new Map<string, string>();
  for (const match of disposition.matchAll(/;\s*([\w*-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))/g)) {
    params.set(match[1]!.toLowerCase(), match[2] !== undefined ? unquote(match[2]) : match[3]!);
  }
  const name = params.get("name");
  if (name === undefined) throw new MultipartError("a part has no name");
  const extended = params.get("filename*");
  return { name, filename: extended !== undefined ? decodeExtended(extended) : params.get("filename") };
}

/**
 * A quoted value as browsers and fetch's FormData write it: `"`, CR and LF percent-encoded
 * (WHATWG's multipart/form-data encoding); a backslash escape as some other clients write it.
 */
const unquote = (value: string) =>
  value.replace(/\\(.)/g, "$1").replace(/%(22|0D|0A)/gi, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));

/** RFC 5987's `UTF-8''name%20here`; anything else undecodable as it came. */
function decodeExtended(value: string): string {
  const match = /^utf-8'[^']*'(.*)$/i.exec(value);
  if (!match) return value;
  try {
    return decodeURIComponent(match[1]!);
  } catch {
    return match[1]!;
  }
}

import { closeSync, mkdirSync, openSync, renameSync, statSync, write as writeAsync, writeSync } from "node:fs";
import { dirname } from "node:path";

// A runner's output: appended to its log file, which rolls over to `<file>.1` past `maxBytes` (so
// at most twice that on disk), and the last `tailChars` kept in memory for error messages.
//
// llama-server writes several log lines per request, each its own chunk on the pipe. Written one
// synchronous write per chunk, decoded and appended to a string tail, they took a third of our
// process's CPU under bench:inference, on the thread that serves requests. So the bytes go to the
// file as they came, batched: whatever arrives while one write is in flight goes in the next; and
// the tail is kept as the last chunks, decoded only when someone asks for it.

export interface OutputLimits {
  maxBytes: number;
  tailChars: number;
}

export const DEFAULT_OUTPUT_LIMITS: OutputLimits = { maxBytes: 4 * 1024 * 1024, tailChars: 8 * 1024 };

const encoder = new TextEncoder();

export class RunnerOutput {
  readonly path: string;
  private readonly limits: OutputLimits;
  private fd: number | undefined;
  private size: number;
  /** The last chunks, about `tailChars` bytes of them (a chunk more at most). */
  private recent: Uint8Array[] = [];
  private recentBytes = 0;
  /** Chunks waiting for the write in flight to finish. */
  private pending: Uint8Array[] = [];
  private writing = false;
  private closing = false;

  constructor(path: string, limits: OutputLimits = DEFAULT_OUTPUT_LIMITS) {
    this.path = path;
    this.limits = limits;
    mkdirSync(dirname(path), { recursive: true });
    this.fd = openSync(path, "a");
    this.size = statSync(path).size;
  }

  /** Never throws: a log that cannot be written (a full disk...) must not stop the pipes draining. */
  write(text: string): void {
    this.append(encoder.encode(text));
  }

  /** Bytes as they came from the pipe (no decoding on the way to the file). */
  append(chunk: Uint8Array): void {
    if (chunk.byteLength === 0) return;
    this.remember(chunk);
    if (this.fd === undefined || this.closing) return;
    this.pending.push(chunk);
    if (!this.writing) this.flush();
  }

  tail(): string {
    const text = new TextDecoder().decode(concat(this.recent));
    return text.slice(-this.limits.tailChars);
  }

  /** Writes what is still pending, then closes the file. */
  close(): void {
    this.closing = true;
    if (!this.writing) this.finish();
  }

  private remember(chunk: Uint8Array): void {
    this.recent.push(chunk);
    this.recentBytes += chunk.byteLength;
    while (this.recent.length > 1 && this.recentBytes - this.recent[0]!.byteLength >= this.limits.tailChars) {
      this.recentBytes -= this.recent.shift()!.byteLength;
    }
  }

  /** One write of everything pending; what comes meanwhile waits for the next. */
  private flush(): void {
    const fd = this.fd;
    if (fd === undefined || this.pending.length === 0) return;
    const batch = concat(this.pending.splice(0));
    try {
      if (this.size >= this.limits.maxBytes) this.roll();
    } catch {
      return this.stop();
    }
    this.writing = true;
    writeAsync(this.fd!, batch, (error) => {
      this.writing = false;
      if (error) return this.stop(); // the tail in memory still explains a failure
      this.size += batch.byteLength;
      if (this.closing) this.finish();
      else this.flush();
    });
  }

  /** The rest, synchronously (the process is gone or the runner stops), then the file closes. */
  private finish(): void {
    const fd = this.fd;
    if (fd === undefined) return;
    try {
      if (this.pending.length > 0) writeSync(fd, concat(this.pending.splice(0)));
    } catch {
      // Nothing more will be written to it either way.
    }
    this.stop();
  }

  private stop(): void {
    const fd = this.fd;
    this.fd = undefined;
    this.pending = [];
    if (fd === undefined) return;
    try {
      closeSync(fd);
    } catch {
      // Nothing more will be written to it either way.
    }
  }

  private roll(): void {
    closeSync(this.fd!);
    renameSync(this.path, `${this.path}.1`);
    this.fd = openSync(this.path, "a");
    this.size = 0;
  }
}

function concat(chunks: Uint8Array[]): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(chunks.reduce((sum, c) => sum + c.byteLength, 0));
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.byteLength;
  }
  return out;
}

/** Copies a byte stream into `output` until it ends. */
export async function pump(stream: ReadableStream<Uint8Array>, output: RunnerOutput): Promise<void> {
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      output.append(value);
    }
  } catch {
    // The pipe broke with the process: what was read is all there is.
  }
}

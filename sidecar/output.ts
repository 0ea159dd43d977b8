import { closeSync, fstatSync, ftruncateSync, mkdirSync, openSync, readSync, renameSync, statSync, writeSync } from "node:fs";
import { copyFile } from "node:fs/promises";
import { dirname } from "node:path";

// A runner's output: appended to its log file, which rolls over to `<file>.1` past `maxBytes` (so
// at most twice that on disk), and the last `tailChars` kept in memory for error messages.
//
// llama-server writes several log lines per request (about 1 KB in 10 lines), each its own chunk on
// the pipe. Written one write per chunk, decoded and appended to a string tail, they took a third
// of our process's CPU under bench:inference, on the thread that serves requests (a write was the
// cost: an asynchronous one under Bun still ran on that thread). So the bytes go to the file as
// they came, gathered for up to FLUSH_MS (or FLUSH_BYTES) and written at once; our own lines (the
// command line, the exit) and a close write at once; the tail is kept as the last chunks, decoded
// only when someone asks for it.

/** How long pumped output may wait to be written, and how much of it. */
const FLUSH_MS = 50;
const FLUSH_BYTES = 256 * 1024;

// Better still, where the runtime hands the file to the child (all three do), llama-server writes
// it itself and none of its output crosses our event loop: the tail is then read back from the
// file, and the size is checked now and then, a file past its limit copied to `.1` and emptied
// (the child appends, so it goes on at the new end; a line written between the copy and the
// emptying is lost).
const ROLL_CHECK_MS = 5_000;

export interface OutputLimits {
  maxBytes: number;
  tailChars: number;
  /** How often the size of a file the child writes itself is checked (default ROLL_CHECK_MS). */
  rollCheckMs?: number;
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
  /** Chunks not written yet, and how many bytes they hold. */
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Whether the child writes the file itself, and the timer that checks its size then. */
  private byChild = false;
  private rollTimer: ReturnType<typeof setInterval> | undefined;
  private rolling = false;

  constructor(path: string, limits: OutputLimits = DEFAULT_OUTPUT_LIMITS) {
    this.path = path;
    this.limits = limits;
    mkdirSync(dirname(path), { recursive: true });
    this.fd = openSync(path, "a");
    this.size = statSync(path).size;
  }

  /** Our own line, written at once. Never throws: a log that cannot be written (a full disk...) must not stop the pipes draining. */
  write(text: string): void {
    this.append(encoder.encode(text));
    this.flush();
  }

  /** Bytes as they came from the pipe (no decoding on the way to the file), written within FLUSH_MS. */
  append(chunk: Uint8Array): void {
    if (chunk.byteLength === 0) return;
    this.remember(chunk);
    if (this.fd === undefined) return;
    this.pending.push(chunk);
    this.pendingBytes += chunk.byteLength;
    if (this.pendingBytes >= FLUSH_BYTES) return this.flush();
    if (this.timer === undefined) {
      this.timer = setTimeout(() => this.flush(), FLUSH_MS);
      (this.timer as { unref?: () => void }).unref?.(); // a log never keeps the process alive
    }
  }

  /** The open log file, for a child that can write to it itself (appending). */
  get descriptor(): number | undefined {
    return this.fd;
  }

  /** From now on the child writes the file itself (see above). */
  writtenByChild(): void {
    this.flush();
    this.byChild = true;
    this.rollTimer = setInterval(() => void this.rollIfLarge(), this.limits.rollCheckMs ?? ROLL_CHECK_MS);
    (this.rollTimer as { unref?: () => void }).unref?.();
  }

  tail(): string {
    const bytes = this.byChild ? this.fileTail() : concat(this.recent);
    return new TextDecoder().decode(bytes).slice(-this.limits.tailChars);
  }

  /** Writes what is still pending, then closes the file. */
  close(): void {
    clearInterval(this.rollTimer);
    this.flush();
    this.stop();
  }

  /** The last `tailChars` bytes of the file, read back (what a child wrote itself). */
  private fileTail(): Uint8Array {
    try {
      const fd = openSync(this.path, "r");
      try {
        const size = fstatSync(fd).size;
        const length = Math.min(size, this.limits.tailChars);
        const bytes = new Uint8Array(length);
        readSync(fd, bytes, 0, length, size - length);
        return bytes;
      } finally {
        closeSync(fd);
      }
    } catch {
      return concat(this.recent); // the file is gone: what we wrote ourselves
    }
  }

  /**
   * Copies a file past its limit to `.1`, then empties it. The copy runs off the event loop: a busy
   * runner's log of several MiB took milliseconds to copy, a stall for every request in flight.
   */
  private async rollIfLarge(): Promise<void> {
    if (this.fd === undefined || this.rolling) return;
    this.rolling = true;
    try {
      if (fstatSync(this.fd).size < this.limits.maxBytes) return;
      await copyFile(this.path, `${this.path}.1`);
      if (this.fd !== undefined) ftruncateSync(this.fd, 0);
    } catch {
      // Left as it is: a log too large is better than a runner stopped for it.
    } finally {
      this.rolling = false;
    }
  }

  private remember(chunk: Uint8Array): void {
    this.recent.push(chunk);
    this.recentBytes += chunk.byteLength;
    while (this.recent.length > 1 && this.recentBytes - this.recent[0]!.byteLength >= this.limits.tailChars) {
      this.recentBytes -= this.recent.shift()!.byteLength;
    }
  }

  /** One write of everything pending. */
  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const fd = this.fd;
    if (fd === undefined || this.pending.length === 0) return;
    const batch = concat(this.pending.splice(0));
    this.pendingBytes = 0;
    try {
      // A file the child writes too is rolled by rollIfLarge: renaming it would leave the child behind.
      if (!this.byChild && this.size >= this.limits.maxBytes) this.roll();
      this.size += writeSync(this.fd!, batch);
    } catch {
      this.stop(); // the tail in memory still explains a failure
    }
  }

  private stop(): void {
    clearInterval(this.rollTimer);
    clearTimeout(this.timer);
    this.timer = undefined;
    const fd = this.fd;
    this.fd = undefined;
    this.pending = [];
    this.pendingBytes = 0;
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

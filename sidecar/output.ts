import { closeSync, mkdirSync, openSync, renameSync, statSync, writeSync } from "node:fs";
import { dirname } from "node:path";

// A runner's output: appended to its log file, which rolls over to `<file>.1` past `maxBytes` (so
// at most twice that on disk), and the last `tailChars` kept in memory for error messages.

export interface OutputLimits {
  maxBytes: number;
  tailChars: number;
}

export const DEFAULT_OUTPUT_LIMITS: OutputLimits = { maxBytes: 4 * 1024 * 1024, tailChars: 8 * 1024 };

export class RunnerOutput {
  readonly path: string;
  private readonly limits: OutputLimits;
  private fd: number | undefined;
  private size: number;
  private recent = "";

  constructor(path: string, limits: OutputLimits = DEFAULT_OUTPUT_LIMITS) {
    this.path = path;
    this.limits = limits;
    mkdirSync(dirname(path), { recursive: true });
    this.fd = openSync(path, "a");
    this.size = statSync(path).size;
  }

  /** Never throws: a log that cannot be written (a full disk...) must not stop the pipes draining. */
  write(text: string): void {
    this.recent = (this.recent + text).slice(-this.limits.tailChars);
    if (this.fd === undefined) return;
    try {
      if (this.size >= this.limits.maxBytes) this.roll();
      this.size += writeSync(this.fd, text);
    } catch {
      // Stop writing the file; the tail in memory still explains a failure.
      this.close();
    }
  }

  tail(): string {
    return this.recent;
  }

  close(): void {
    const fd = this.fd;
    this.fd = undefined;
    if (fd === undefined) return;
    try {
      closeSync(fd);
    } catch {
      // Nothing more will be written to it either way.
    }
  }

  private roll(): void {
    this.close();
    renameSync(this.path, `${this.path}.1`);
    this.fd = openSync(this.path, "a");
    this.size = 0;
  }
}

/** Copies a byte stream into `output` as text until it ends. */
export async function pump(stream: ReadableStream<Uint8Array>, output: RunnerOutput): Promise<void> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      output.write(decoder.decode(value, { stream: true }));
    }
  } catch {
    // The pipe broke with the process: what was read is all there is.
  } finally {
    output.write(decoder.decode());
  }
}

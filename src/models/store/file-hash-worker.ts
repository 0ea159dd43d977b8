import { createHash } from "node:crypto";
import { closeSync, openSync, readSync } from "node:fs";
import { parentPort } from "node:worker_threads";

// The thread behind prefix-hash.ts: hashes a file from its first byte as far as it is told the
// file is written, reading it itself into one buffer, so the bytes cross no thread boundary and
// the downloading thread does nothing for the hash but send a number now and then.

export type FileHashRequest = { open: string } | { upTo: number } | { done: true };
export type FileHashReply = { digest: string } | { error: string };

const port = parentPort!;
const hash = createHash("sha256");
const buffer = Buffer.allocUnsafe(1 << 20);
let fd: number | undefined;
let hashed = 0;
let failed = false;

function hashUpTo(end: number): void {
  while (hashed < end) {
    const read = readSync(fd!, buffer, 0, Math.min(buffer.byteLength, end - hashed), hashed);
    if (read === 0) throw new Error(`the partial file ends at ${hashed} bytes, before its written ${end}`);
    hash.update(buffer.subarray(0, read));
    hashed += read;
  }
}

port.on("message", (request: FileHashRequest) => {
  if (failed) return;
  try {
    if ("open" in request) fd = openSync(request.open, "r");
    else if ("upTo" in request) hashUpTo(request.upTo);
    else {
      closeSync(fd!);
      port.postMessage({ digest: `sha256:${hash.digest("hex")}` } satisfies FileHashReply);
    }
  } catch (error) {
    failed = true;
    port.postMessage({ error: error instanceof Error ? error.message : String(error) } satisfies FileHashReply);
  }
});

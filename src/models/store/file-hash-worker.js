// @ts-check
import { createHash } from "node:crypto";
import { closeSync, openSync, readSync } from "node:fs";
import { parentPort } from "node:worker_threads";

/** @import { FileHashReply, FileHashRequest } from "./prefix-hash.ts" */

// The thread behind prefix-hash.ts: hashes a file from its first byte as far as it is told the
// file is written, reading it itself into one buffer, so the bytes cross no thread boundary and
// the downloading thread does nothing for the hash but send a number now and then.
//
// JavaScript for the reason given in hash-worker.js (a thread's type stripping costs Node memory).

const port = /** @type {import("node:worker_threads").MessagePort} */ (parentPort);
const hash = createHash("sha256");
const buffer = Buffer.allocUnsafe(1 << 20);
/** @type {number | undefined} */
let fd;
let hashed = 0;
let failed = false;

/** @param {number} end */
function hashUpTo(end) {
  while (hashed < end) {
    const read = readSync(/** @type {number} */ (fd), buffer, 0, Math.min(buffer.byteLength, end - hashed), hashed);
    if (read === 0) throw new Error(`the partial file ends at ${hashed} bytes, before its written ${end}`);
    hash.update(buffer.subarray(0, read));
    hashed += read;
  }
}

port.on("message", (/** @type {FileHashRequest} */ request) => {
  if (failed) return;
  try {
    if ("open" in request) fd = openSync(request.open, "r");
    else if ("upTo" in request) hashUpTo(request.upTo);
    else {
      closeSync(/** @type {number} */ (fd));
      port.postMessage(/** @satisfies {FileHashReply} */ ({ digest: `sha256:${hash.digest("hex")}` }));
    }
  } catch (error) {
    failed = true;
    port.postMessage(/** @satisfies {FileHashReply} */ ({ error: error instanceof Error ? error.message : String(error) }));
  }
});

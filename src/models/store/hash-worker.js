// @ts-check
import { createHash } from "node:crypto";
import { parentPort } from "node:worker_threads";

/** @import { HashReply, HashRequest } from "./background-hash.ts" */

// The thread behind background-hash.ts: hashes the chunks it is sent, in the order sent, and
// says how many bytes it has done so the sender can bound what waits here.
//
// JavaScript, not TypeScript (checked all the same, through the JSDoc types): Node strips the
// types of every thread's modules anew, in a compiler of its own per thread, and that compiler
// alone held about 14 MiB more per thread than this file does (Bun and Deno do not care).

const port = /** @type {import("node:worker_threads").MessagePort} */ (parentPort);
const hash = createHash("sha256");

port.on("message", (/** @type {HashRequest} */ request) => {
  if ("done" in request) {
    port.postMessage(/** @satisfies {HashReply} */ ({ digest: `sha256:${hash.digest("hex")}` }));
    return;
  }
  let bytes = 0;
  for (const chunk of request.chunks) {
    hash.update(chunk);
    bytes += chunk.byteLength;
    // Frees the chunk's memory now rather than at this thread's next garbage collection, which
    // may be hundreds of megabytes later (moved buffers are not this heap's own memory).
    /** @type {ArrayBuffer & { transfer(length: number): ArrayBuffer }} */ (chunk.buffer).transfer(0);
  }
  port.postMessage(/** @satisfies {HashReply} */ ({ hashed: bytes }));
});

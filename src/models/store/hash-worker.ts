import { createHash } from "node:crypto";
import { parentPort } from "node:worker_threads";

// The thread behind background-hash.ts: hashes the chunks it is sent, in the order sent, and
// says how many bytes it has done so the sender can bound what waits here.

export type HashRequest = { chunks: Uint8Array[] } | { done: true };
export type HashReply = { hashed: number } | { digest: string };

const port = parentPort!;
const hash = createHash("sha256");

port.on("message", (request: HashRequest) => {
  if ("done" in request) {
    port.postMessage({ digest: `sha256:${hash.digest("hex")}` } satisfies HashReply);
    return;
  }
  let bytes = 0;
  for (const chunk of request.chunks) {
    hash.update(chunk);
    bytes += chunk.byteLength;
    // Frees the chunk's memory now rather than at this thread's next garbage collection, which
    // may be hundreds of megabytes later (moved buffers are not this heap's own memory).
    (chunk.buffer as ArrayBuffer & { transfer(length: number): ArrayBuffer }).transfer(0);
  }
  port.postMessage({ hashed: bytes } satisfies HashReply);
});

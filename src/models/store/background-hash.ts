import { Worker } from "node:worker_threads";

// sha256 of a download on a thread of its own, so that hashing (about as costly as receiving
// and writing together) runs beside them instead of after each chunk. Chunks are moved to the
// thread, not copied: the caller hands them over once it no longer needs them (once written).

/** What the thread (hash-worker.js) is sent, and what it answers. */
export type HashRequest = { chunks: Uint8Array[] } | { done: true };
export type HashReply = { hashed: number } | { digest: string };

// Bytes handed over but not yet hashed: bounds memory when hashing is slower than the network.
const BACKLOG_BYTES = 8 << 20;

export type BackgroundHash = {
  /** Hashes `chunks` after those handed over before; their buffers move away (empty here after). Waits while the backlog is full. */
  update(chunks: Uint8Array[]): Promise<void>;
  /** `sha256:<hex>` of everything handed over; ends the thread. */
  digest(): Promise<string>;
  /** Ends the thread without a digest (after a failure). */
  close(): Promise<void>;
};

type Waiter = { resolve(value: string): void; reject(error: Error): void };

/** Buffers to move with the chunks; a chunk that views only part of its buffer is copied, since the rest may not be ours. */
function movable(chunks: Uint8Array[]): { chunks: Uint8Array[]; transfer: ArrayBuffer[] } {
  const owned = chunks.map((chunk) => (chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength ? chunk : chunk.slice()));
  return { chunks: owned, transfer: [...new Set(owned.map((chunk) => chunk.buffer as ArrayBuffer))] };
}

export function backgroundHash(): BackgroundHash {
  const worker = new Worker(new URL("./hash-worker.js", import.meta.url));
  let backlog = 0;
  let failure: Error | undefined;
  const room: Waiter[] = [];
  let result: Waiter | undefined;
  const fail = (error: Error) => {
    failure ??= error;
    for (const waiter of [...room.splice(0), ...(result ? [result] : [])]) waiter.reject(failure);
  };
  worker.on("message", (reply: HashReply) => {
    if ("digest" in reply) return result?.resolve(reply.digest);
    backlog -= reply.hashed;
    if (backlog < BACKLOG_BYTES) for (const waiter of room.splice(0)) waiter.resolve("");
  });
  worker.on("error", fail);
  worker.on("exit", () => fail(new Error("the hashing thread stopped")));
  const post = (request: HashRequest, transfer: ArrayBuffer[] = []) => worker.postMessage(request, transfer);
  const wait = (add: (waiter: Waiter) => void) =>
    new Promise<string>((resolve, reject) => (failure ? reject(failure) : add({ resolve, reject })));

  return {
    async update(chunks) {
      if (failure) throw failure;
      const moved = movable(chunks);
      for (const chunk of moved.chunks) backlog += chunk.byteLength;
      post({ chunks: moved.chunks }, moved.transfer);
      while (backlog >= BACKLOG_BYTES) await wait((waiter) => room.push(waiter));
    },
    async digest() {
      try {
        const digest = wait((waiter) => (result = waiter));
        post({ done: true });
        return await digest;
      } finally {
        await worker.terminate();
      }
    },
    async close() {
      await worker.terminate();
    },
  };
}

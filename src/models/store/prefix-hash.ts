import { Worker } from "node:worker_threads";

// sha256 of a file written in parallel parts: parts arrive out of order, and sha256 takes bytes
// in order only, so the hash follows the file's written prefix as it grows, on a thread of its
// own that reads back bytes written moments before (from the page cache, not the disk). No byte
// is kept in memory for it, and the file is read once, during the download, not after it.

/** What the thread (file-hash-worker.js) is sent, and what it answers. */
export type FileHashRequest = { open: string } | { upTo: number } | { done: true };
export type FileHashReply = { digest: string } | { error: string };

export type PrefixHash = {
  /** Says that the file's first `bytes` are written: they are hashed as soon as the thread gets there. */
  advance(bytes: number): void;
  /** Hashes up to `size` and gives `sha256:<hex>`; ends the thread. */
  digest(size: number): Promise<string>;
  /** Ends the thread without a digest (after a failure). */
  close(): Promise<void>;
};

export function prefixHash(path: string): PrefixHash {
  const worker = new Worker(new URL("./file-hash-worker.js", import.meta.url));
  const post = (request: FileHashRequest) => worker.postMessage(request);
  let told = 0;
  let settle: { resolve(digest: string): void; reject(error: Error): void } | undefined;
  let failure: Error | undefined;
  const fail = (error: Error) => {
    failure ??= error;
    settle?.reject(failure);
  };
  worker.on("message", (reply: FileHashReply) => ("digest" in reply ? settle?.resolve(reply.digest) : fail(new Error(reply.error))));
  worker.on("error", fail);
  worker.on("exit", () => fail(new Error("the hashing thread stopped")));
  post({ open: path });
  const advance = (bytes: number) => {
    if (bytes <= told) return;
    told = bytes;
    post({ upTo: bytes });
  };

  return {
    advance,
    async digest(size) {
      try {
        const digest = new Promise<string>((resolve, reject) => (failure ? reject(failure) : (settle = { resolve, reject })));
        advance(size);
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

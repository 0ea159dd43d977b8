import type { FileHandle } from "node:fs/promises";
import type { BackgroundHash } from "./background-hash.ts";

// sha256 of a file written in parallel parts: parts arrive out of order, and sha256 takes bytes
// in order only, so the hash follows the file's written prefix as it grows, reading back bytes
// written moments before (from the page cache, not the disk) and hashing them on the hashing
// thread. No byte is kept in memory for it; the file is read once, during the download.

const READ_BYTES = 1 << 20;

export type PrefixHash = {
  /** Says that the file's first `bytes` are written: they are hashed as soon as the hash gets there. */
  advance(bytes: number): void;
  /** Hashes up to `size` and gives `sha256:<hex>`; ends the hashing thread. */
  digest(size: number): Promise<string>;
  /** Stops (after a failure), without a digest. */
  close(): Promise<void>;
};

export function prefixHash(file: FileHandle, hash: BackgroundHash): PrefixHash {
  let hashed = 0;
  let target = 0;
  let pump: Promise<void> | undefined;
  let failure: unknown;

  async function run(): Promise<void> {
    while (hashed < target) {
      // A buffer of its own each time: it moves to the hashing thread.
      const chunk = new Uint8Array(Math.min(READ_BYTES, target - hashed));
      const { bytesRead } = await file.read(chunk, 0, chunk.byteLength, hashed);
      if (bytesRead === 0) throw new Error(`the partial file ends at ${hashed} bytes, before its written ${target}`);
      await hash.update([chunk.subarray(0, bytesRead)]);
      hashed += bytesRead;
    }
  }

  function advance(bytes: number): void {
    target = Math.max(target, bytes);
    if (pump || failure !== undefined || hashed >= target) return;
    pump = run()
      .catch((error: unknown) => void (failure = error)) // told by digest()
      .finally(() => (pump = undefined));
  }

  return {
    advance,
    async digest(size) {
      advance(size);
      while (pump) await pump;
      if (failure !== undefined) throw failure;
      return hash.digest();
    },
    async close() {
      failure ??= new Error("closed");
      await pump;
      await hash.close();
    },
  };
}

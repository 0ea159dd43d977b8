import { open, type FileHandle } from "node:fs/promises";

// A file as a byte stream for an upload (a push's blobs, a package's archive), read in 1 MiB chunks
// only as fast as the receiver takes them; `read` is told of each chunk handed on.

const CHUNK = 1 << 20;

export function fileBody(path: string, read: (bytes: number) => void = () => {}): ReadableStream<Uint8Array> {
  let file: FileHandle | undefined;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        file ??= await open(path, "r");
        const chunk = new Uint8Array(CHUNK);
        const { bytesRead } = await file.read(chunk, 0, CHUNK, null);
        if (bytesRead === 0) {
          await file.close();
          return controller.close();
        }
        read(bytesRead);
        controller.enqueue(chunk.subarray(0, bytesRead));
      },
      cancel: () => file?.close(),
    },
    { highWaterMark: 0 },
  );
}

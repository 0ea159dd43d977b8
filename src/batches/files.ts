import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, readFile, rename, stat, unlink, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../models/store/files.ts";

// OpenAI's Files, as batches need them: a file is its bytes (`<id>.data`) and its record
// (`<id>.json`, OpenAI's File object plus its owner: the key name that uploaded it, or the batch's
// for its output and error files). Each is written under a temporary name and renamed: an upload
// streams into `upload-<random>.part` and becomes a file only once whole (a listing reads records,
// so it never shows one half written).

export type FileRecord = {
  id: string;
  object: "file";
  bytes: number;
  created_at: number;
  filename: string;
  purpose: "batch" | "batch_output";
  owner: string;
};

/** What answers show of a file: OpenAI's object, without its owner. */
export const shown = ({ owner: _, ...file }: FileRecord) => ({ ...file, status: "processed" });

/** Bytes received into the store's folder, not yet a file: adopt it, or discard it. */
export type Incoming = { path: string; bytes: number };

export interface FileStore {
  /**
   * Writes `content` as it comes to a temporary file beside the files; if `content` fails (a
   * bound crossed, the client gone) the partial file is removed and its error thrown.
   */
  receive(content: AsyncIterable<Uint8Array>): Promise<Incoming>;
  discard(incoming: Incoming): Promise<void>;
  /** Takes the file at `path` (moved, not copied) as a new file. */
  adopt(path: string, meta: Pick<FileRecord, "filename" | "purpose" | "owner">, id?: string): Promise<FileRecord>;
  get(id: string): Promise<FileRecord | undefined>;
  list(): Promise<FileRecord[]>;
  /** Where the file's bytes live, for reading them from disk a piece at a time. */
  dataPath(id: string): string;
  /** The file's bytes as a stream read from disk as its reader asks (never whole in memory). */
  stream(id: string): Promise<ReadableStream<Uint8Array>>;
  remove(id: string): Promise<void>;
}

const ID = /^file-[\w-]{1,64}$/;
const PART = ".part";
/** What a download reads from disk at a time. */
const READ_BYTES = 128 * 1024;
export const newFileId = () => `file-${randomBytes(12).toString("hex")}`;

export function createFileStore(dir: string): FileStore {
  const record = (id: string) => join(dir, `${id}.json`);
  const data = (id: string) => join(dir, `${id}.data`);
  const save = async (id: string, bytes: number, meta: Pick<FileRecord, "filename" | "purpose" | "owner">) => {
    const file: FileRecord = { id, object: "file", bytes, created_at: Math.floor(Date.now() / 1000), ...meta };
    await writeFileAtomic(record(id), JSON.stringify(file), { durable: false });
    return file;
  };
  const get = async (id: string) => {
    if (!ID.test(id)) return undefined;
    try {
      return JSON.parse(await readFile(record(id), "utf8")) as FileRecord;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw error;
    }
  };
  // Uploads a previous run left half written (it stopped or crashed while receiving them); the
  // folder is this server's own, as its batches are. Each upload waits for this.
  const swept = (async () => {
    const names = await readdir(dir).catch(() => [] as string[]);
    await Promise.all(names.filter((n) => n.endsWith(PART)).map((n) => unlink(join(dir, n)).catch(() => {})));
  })();
  return {
    async receive(content) {
      await swept;
      await mkdir(dir, { recursive: true });
      const path = join(dir, `upload-${randomBytes(12).toString("hex")}${PART}`);
      const file = await open(path, "wx");
      let bytes = 0;
      try {
        for await (const chunk of content) {
          // Awaited: the next chunk is read only once this one is written, so a fast client is
          // paced by the disk instead of piling up in memory.
          for (let at = 0; at < chunk.byteLength; ) at += (await file.write(chunk, at)).bytesWritten;
          bytes += chunk.byteLength;
        }
        await file.close();
        return { path, bytes };
      } catch (error) {
        await file.close().catch(() => {});
        await unlink(path).catch(() => {});
        throw error;
      }
    },
    discard: ({ path }) => unlink(path).catch(() => {}),
    async adopt(path, meta, id = newFileId()) {
      await mkdir(dir, { recursive: true });
      await rename(path, data(id));
      return save(id, (await stat(data(id))).size, meta);
    },
    get,
    async list() {
      const names = await readdir(dir).catch(() => [] as string[]);
      const files = await Promise.all(names.filter((n) => n.endsWith(".json")).map((n) => get(n.slice(0, -5))));
      return files.filter((f): f is FileRecord => f !== undefined).sort((a, b) => b.created_at - a.created_at);
    },
    dataPath: data,
    stream: async (id) => streamOf(await open(data(id), "r")),
    async remove(id) {
      await unlink(record(id));
      await unlink(data(id)).catch(() => {});
    },
  };
}

/** A file's bytes from its open handle, a chunk per pull; the handle is closed at the end or when the reader cancels. */
function streamOf(file: FileHandle): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const chunk = new Uint8Array(READ_BYTES);
        const { bytesRead } = await file.read(chunk, 0, READ_BYTES, null);
        if (bytesRead > 0) return controller.enqueue(chunk.subarray(0, bytesRead));
        await file.close();
        controller.close();
      } catch (error) {
        await file.close().catch(() => {});
        controller.error(error);
      }
    },
    cancel: () => file.close(),
  });
}

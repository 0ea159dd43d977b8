import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../models/store/files.ts";

// OpenAI's Files, as batches need them: a file is its bytes (`<id>.data`) and its record
// (`<id>.json`, OpenAI's File object plus its owner: the key name that uploaded it, or the batch's
// for its output and error files). Each is written under a temporary name and renamed.

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

export interface FileStore {
  /** Keeps `data` as a new file. */
  create(data: Uint8Array, meta: Pick<FileRecord, "filename" | "purpose" | "owner">): Promise<FileRecord>;
  /** Takes the file at `path` (moved, not copied) as a new file. */
  adopt(path: string, meta: Pick<FileRecord, "filename" | "purpose" | "owner">, id?: string): Promise<FileRecord>;
  get(id: string): Promise<FileRecord | undefined>;
  list(): Promise<FileRecord[]>;
  content(id: string): Promise<Uint8Array<ArrayBuffer>>;
  /** Where the file's bytes live, for reading them from disk a piece at a time. */
  dataPath(id: string): string;
  remove(id: string): Promise<void>;
}

const ID = /^file-[\w-]{1,64}$/;
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
  return {
    async create(bytes, meta) {
      const id = newFileId();
      await writeFileAtomic(data(id), bytes, { durable: false });
      return save(id, bytes.length, meta);
    },
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
    content: async (id) => new Uint8Array(await readFile(data(id))),
    dataPath: data,
    async remove(id) {
      await unlink(record(id));
      await unlink(data(id)).catch(() => {});
    },
  };
}

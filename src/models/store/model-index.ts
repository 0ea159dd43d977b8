import { readFile } from "node:fs/promises";
import * as z from "zod";
import { isMissing, writeFileAtomic } from "./files.ts";
import type { Layout } from "./layout.ts";

// The index (`models.json`): which models the store holds, their tags, configs and blobs. It is
// only ever replaced whole (temporary file, then rename), after every blob it names is in place,
// so a crash at any moment leaves the old index or the new one, and every model it lists loads.

const Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);

export const ModelConfig = z.looseObject({
  format: z.string().optional(),
  quantization: z.string().optional(),
  parameters: z.string().optional(),
  architecture: z.string().optional(),
  size: z.string().optional(),
  context_size: z.number().optional(),
  gguf: z.record(z.string(), z.string()).optional(),
});
export type ModelConfig = z.infer<typeof ModelConfig>;

const Entry = z.object({
  id: Digest,
  tags: z.array(z.string()),
  created: z.number(),
  config: ModelConfig,
  files: z.object({
    gguf: z.array(Digest).min(1),
    mmproj: Digest.optional(),
    chatTemplate: Digest.optional(),
    license: Digest.optional(),
  }),
});
export type IndexEntry = z.infer<typeof Entry>;

const IndexFile = z.object({ version: z.literal(1), models: z.array(Entry) });

// The index as last read or written, per store root. Every inference request resolves its model
// here, so it must not cost a file read and a parse each time; this process is the store's only
// writer (see the README), so what it wrote last is what the file holds. Callers do not mutate it.
const cache = new Map<string, IndexEntry[]>();

export async function readIndex(layout: Layout): Promise<IndexEntry[]> {
  const cached = cache.get(layout.root);
  if (cached) return cached;
  let text: string;
  try {
    text = await readFile(layout.indexFile, "utf8");
  } catch (error) {
    if (isMissing(error)) return [];
    throw error;
  }
  const models = IndexFile.parse(JSON.parse(text)).models;
  cache.set(layout.root, models);
  return models;
}

async function writeIndex(layout: Layout, models: IndexEntry[]): Promise<void> {
  await writeFileAtomic(layout.indexFile, `${JSON.stringify({ version: 1, models }, null, 2)}\n`);
  cache.set(layout.root, models);
}

// Read-modify-write of the index is serialised per store root, so two pulls (or a pull and a
// delete) in this process never lose each other's change.
const queues = new Map<string, Promise<unknown>>();

export function updateIndex<T>(layout: Layout, change: (models: IndexEntry[]) => { models: IndexEntry[]; result: T } | Promise<{ models: IndexEntry[]; result: T }>): Promise<T> {
  const previous = queues.get(layout.root) ?? Promise.resolve();
  const next = previous.catch(() => {}).then(async () => {
    // A copy: a change that throws half-way must not leave its edits in the cache.
    const { models, result } = await change(structuredClone(await readIndex(layout)));
    await writeIndex(layout, models);
    return result;
  });
  queues.set(layout.root, next);
  void next.finally(() => {
    if (queues.get(layout.root) === next) queues.delete(layout.root);
  }).catch(() => {});
  return next;
}

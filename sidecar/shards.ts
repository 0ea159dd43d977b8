import { mkdir, rm, symlink } from "node:fs/promises";
import { join } from "node:path";

// llama-server loads weights split in several GGUF files from the first file's path: the first
// file says how many there are (`split.count`), and llama.cpp finds the others beside it by name,
// `<prefix>-00002-of-00003.gguf` (llama_split_path: `%s-%05d-of-%05d.gguf`), checking each one's
// `split.no`. The model store keeps each file under its digest, so a runner of a split model gets
// a folder of links named that way, beside its socket, for as long as it runs.

/** The name llama.cpp gives file `index` (from 0) of `count`. */
export const shardFileName = (prefix: string, index: number, count: number) =>
  `${prefix}-${String(index + 1).padStart(5, "0")}-of-${String(count).padStart(5, "0")}.gguf`;

export const shardFolder = (runDir: string, name: string) => join(runDir, `${name}.shards`);

/** Links `paths` (every file, in order) as llama.cpp names them; resolves the first link's path. */
export async function linkShards(runDir: string, name: string, paths: string[]): Promise<string> {
  const folder = shardFolder(runDir, name);
  await rm(folder, { recursive: true, force: true }); // a runner of this name that crashed left it
  await mkdir(folder, { recursive: true });
  const links = paths.map((_, i) => join(folder, shardFileName("model", i, paths.length)));
  for (const [i, path] of paths.entries()) await symlink(path, links[i]!);
  return links[0]!;
}

export const unlinkShards = (runDir: string, name: string) => rm(shardFolder(runDir, name), { recursive: true, force: true });

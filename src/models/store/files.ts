import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, rename, stat, statfs, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";

// Small file helpers every store module shares: a write is made to a temporary name beside the
// target, flushed to disk, then renamed over it, so a reader (or a crash) sees the old or the new
// content, never half of one. What must survive a crash of the machine is flushed first.

export const temporaryName = (path: string) => `${path}.${randomBytes(6).toString("hex")}.tmp`;

/** `beforeRename`: a last check, once the temporary file is written (one that throws leaves the target as it was). */
export async function writeFileAtomic(path: string, data: string | Uint8Array, { durable = true, beforeRename }: { durable?: boolean; beforeRename?: () => Promise<void> } = {}): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const temporary = temporaryName(path);
  const file = await open(temporary, "w");
  try {
    await file.writeFile(data);
    if (durable) await file.sync();
  } finally {
    await file.close();
  }
  try {
    await beforeRename?.();
    await rename(temporary, path);
  } catch (error) {
    await unlink(temporary).catch(() => {});
    throw error;
  }
}

export async function removeIfPresent(path: string): Promise<void> {
  await unlink(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== "ENOENT") throw error;
  });
}

export const isMissing = (error: unknown) => (error as NodeJS.ErrnoException)?.code === "ENOENT";

/**
 * Bytes an unprivileged writer may still use on the filesystem that holds `path` (or would hold
 * it: a folder not made yet is measured at its nearest existing parent). Undefined when it cannot
 * be read (Deno without `--allow-sys=statfs`): then no pull is refused for want of space.
 */
export async function freeSpace(path: string): Promise<number | undefined> {
  try {
    const { bavail, bsize } = await statfs(path);
    return bavail * bsize;
  } catch (error) {
    const parent = dirname(path);
    return isMissing(error) && parent !== path ? freeSpace(parent) : undefined;
  }
}

/** Bytes of the files under `folder`, links not followed; 0 when it does not exist. */
export async function folderBytes(folder: string): Promise<number> {
  const entries = await readdir(folder, { withFileTypes: true }).catch(() => []);
  let total = 0;
  for (const entry of entries) {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) total += await folderBytes(path);
    else if (entry.isFile()) total += await stat(path).then((s) => s.size, () => 0);
  }
  return total;
}


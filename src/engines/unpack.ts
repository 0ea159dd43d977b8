import { createReadStream } from "node:fs";
import { chmod, link, lstat, mkdir, open, readdir, rm, symlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { badRequest } from "../http/errors.ts";
import { readTar, type TarEntry } from "../models/package/tar.ts";
import { entryParts, quoted, relativeTarget, resolveInside } from "../models/package/tar-paths.ts";

// An engine image's layers unpacked into its folder, each entry placed by its real path, never by
// its name as text. Every folder on an entry's way is checked on disk (lstat, never followed) and
// must be a real folder that the image made: an entry, a whiteout or an opaque marker under a
// symbolic link or a file refuses the image. Files are created exclusively (never through what
// stands there), whatever stood there is removed as itself (a link, not its target). Links are kept
// across all the image's layers: a symbolic link whose target, followed through every link so
// far, leaves the folder refuses the image, and so does one that a later layer's links make leave
// it (checked again once all layers are in: `checkLinks`). An absolute target is written relative
// to the image's root, where the image's programs would find it. A hard link is made only to a
// file of the image. Files are written without execute bits: the layout gives them back to the
// binary it names and to its libraries (see `markExecutable`), never to the rest. Only a layer
// whose digest was checked is ever unpacked; a refused image is removed whole by the pull.

const LAYER_STALL_MS = 30_000;

/** Layer media types taken: OCI's and Docker's tar, plain or gzip. */
export const LAYER_TYPES = [
  "application/vnd.oci.image.layer.v1.tar",
  "application/vnd.oci.image.layer.v1.tar+gzip",
  "application/vnd.docker.image.rootfs.diff.tar.gzip",
  "application/vnd.docker.image.rootfs.diff.tar",
];

const refused = (why: string) => badRequest("unsafe_engine", `the engine image is refused: ${why}`);

/** The modes the archive gave each file, for the layout to give execute bits back to. */
export type Modes = Map<string, number>;

/** What an image's layers have put in its folder so far, kept from one layer to the next. */
export type ImageTree = {
  root: string;
  /** Symbolic links by path (parts joined by `/`), to their target as written on disk. */
  links: Map<string, string>;
  modes: Modes;
  /** Paths known to be real folders (checked or made); "" is the root. */
  folders: Set<string>;
};

export const imageTree = (root: string): ImageTree => ({ root, links: new Map(), modes: new Map(), folders: new Set([""]) });

/** Unpacks the layer file at `layer` into the image; later layers over earlier ones, as an image is. */
export async function unpackLayer(layer: string, gzip: boolean, image: ImageTree): Promise<void> {
  const raw = Readable.toWeb(createReadStream(layer)) as unknown as ReadableStream<Uint8Array>;
  const body = gzip ? raw.pipeThrough(new DecompressionStream("gzip") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>) : raw;
  await mkdir(image.root, { recursive: true });
  // This layer's own entries, which its opaque markers keep.
  const written = new Set<string>();
  for await (const entry of readTar(body, LAYER_STALL_MS, { links: "handed-on", refuse: refused })) {
    if (entry.parts.length === 0) continue;
    const folder = entry.parts.slice(0, -1);
    const base = entry.parts.at(-1)!;
    await placeFolder(image, folder, entry.name);
    if (base.startsWith(".wh.")) {
      await whiteout(image, folder, base, written);
      continue;
    }
    written.add(entry.name);
    await place(image, entry);
  }
}

/** Whether `key` is `base` or lies under it. */
const under = (key: string, base: string) => key === base || key.startsWith(`${base}/`);

/** Forgets what the image knew of `name` and everything under it, once it is removed from disk. */
function forget(image: ImageTree, name: string): void {
  for (const table of [image.links, image.modes]) for (const key of [...table.keys()]) if (under(key, name)) table.delete(key);
  for (const key of [...image.folders]) if (key !== "" && under(key, name)) image.folders.delete(key);
}

/** Removes what stands at `name` (a link as itself, a folder with its contents), if anything does. */
async function remove(image: ImageTree, name: string): Promise<void> {
  await rm(join(image.root, name), { recursive: true, force: true });
  forget(image, name);
}

/** Makes sure every part of `folder` is a real folder of the image, making the missing ones; refuses links and files on the way. */
async function placeFolder(image: ImageTree, folder: string[], entry: string): Promise<void> {
  for (let i = 1; i <= folder.length; i++) {
    const key = folder.slice(0, i).join("/");
    if (image.folders.has(key)) continue;
    const found = await lstat(join(image.root, key)).catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return undefined;
      throw error;
    });
    if (!found) await mkdir(join(image.root, key));
    else if (found.isSymbolicLink()) throw refused(`the entry ${quoted(entry)} lies under a symbolic link (${quoted(key)})`);
    else if (!found.isDirectory()) throw refused(`the entry ${quoted(entry)} lies under a file (${quoted(key)})`);
    image.folders.add(key);
  }
}

/** A whiteout removes what an earlier layer put there; an opaque marker empties its folder of what earlier layers put in it. */
async function whiteout(image: ImageTree, folder: string[], base: string, written: Set<string>): Promise<void> {
  const prefix = folder.length ? `${folder.join("/")}/` : "";
  if (base === ".wh..wh..opq") {
    for (const child of await readdir(join(image.root, ...folder))) if (!written.has(`${prefix}${child}`)) await remove(image, `${prefix}${child}`);
    return;
  }
  const gone = base.slice(".wh.".length);
  if (gone === "" || gone === "." || gone === "..") throw refused(`the whiteout ${quoted(`${prefix}${base}`)} names no entry`);
  await remove(image, `${prefix}${gone}`);
}

/** Puts one entry (folder, symbolic or hard link, file) at its place, replacing what stood there. */
async function place(image: ImageTree, entry: TarEntry): Promise<void> {
  const path = join(image.root, entry.name);
  if (entry.type === "5") {
    if (!(await lstat(path).then((s) => s.isDirectory(), () => false))) {
      await remove(image, entry.name);
      await mkdir(path);
    }
    image.folders.add(entry.name);
    return;
  }
  await remove(image, entry.name);
  if (entry.type === "2") return placeSymlink(image, entry.parts, entry.link!);
  if (entry.type === "1") return placeHardLink(image, entry.name, entry.link!);
  if (entry.type !== "0" && entry.type !== "7") return; // devices, fifos: an engine has none to use
  await writeEntry(path, entry.body);
  image.modes.set(entry.name, entry.mode);
}

async function placeSymlink(image: ImageTree, parts: string[], written: string): Promise<void> {
  const name = parts.join("/");
  const folder = parts.slice(0, -1);
  const target = relativeTarget(folder, written);
  // Judged with itself among the links: a link through itself loops.
  image.links.set(name, target);
  if (!resolveInside(image.links, folder, target)) throw refused(`the symbolic link ${quoted(name)} leads out of the image or loops (to ${quoted(written)})`);
  await symlink(target, join(image.root, name));
}

/** A hard link: only to a file the image already holds, reached through real folders. */
async function placeHardLink(image: ImageTree, name: string, written: string): Promise<void> {
  const target = entryParts(written);
  const to = "parts" in target ? target.parts.join("/") : "";
  const folders = "parts" in target ? target.parts.slice(0, -1) : [];
  const real = to !== "" && folders.every((_, i) => image.folders.has(folders.slice(0, i + 1).join("/")));
  const file = real && (await lstat(join(image.root, to)).then((s) => s.isFile(), () => false));
  if (!file) throw refused(`the hard link ${quoted(name)} is not to a file of the image (to ${quoted(written)})`);
  await link(join(image.root, to), join(image.root, name));
  if (image.modes.has(to)) image.modes.set(name, image.modes.get(to)!);
}

/** Once every layer is in: each link still resolves inside, whatever later layers' links made of its path. */
export function checkLinks(image: ImageTree): void {
  for (const [name, target] of image.links) {
    if (!resolveInside(image.links, name.split("/").slice(0, -1), target)) throw refused(`the symbolic link ${quoted(name)} leads out of the image or loops (to ${quoted(target)}) through the links of later layers`);
  }
}

async function writeEntry(path: string, body: ReadableStream<Uint8Array>): Promise<void> {
  const file = await open(path, "wx", 0o644);
  try {
    for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) await file.write(chunk);
  } finally {
    await file.close();
  }
}

/** Gives the archive's execute bits back to the files in `dirs` (the binary's and the libraries' folders). */
export async function markExecutable(image: ImageTree, dirs: string[]): Promise<void> {
  for (const [name, mode] of image.modes) {
    if (!dirs.includes(dirname(name)) || (mode & 0o111) === 0) continue;
    await chmod(join(image.root, name), 0o755);
  }
}

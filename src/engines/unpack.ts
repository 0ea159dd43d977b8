import { createReadStream } from "node:fs";
import { chmod, mkdir, open, rm, symlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { badRequest } from "../http/errors.ts";
import { readTar } from "../models/package/tar.ts";

// An engine image's layers unpacked into its folder, with the tar checks of `POST /models/load`:
// no entry outside the folder, no hard link, no symbolic link whose target leaves it (nor any
// entry written through one). Files are written without execute bits: the layout gives them
// back to the binary it names and to its libraries (see `markExecutable`), never to the rest.
// Only a layer whose digest was checked is ever unpacked.

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

/** Unpacks the layer file at `layer` into `root`; later layers over earlier ones, as an image is. */
export async function unpackLayer(layer: string, gzip: boolean, root: string, modes: Modes): Promise<void> {
  const raw = Readable.toWeb(createReadStream(layer)) as unknown as ReadableStream<Uint8Array>;
  const body = gzip ? raw.pipeThrough(new DecompressionStream("gzip") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>) : raw;
  const links = new Set<string>();
  for await (const entry of readTar(body, LAYER_STALL_MS, { links: "inside" })) {
    const name = entry.name.replace(/\/+$/, "");
    if (name === "" || name === ".") continue;
    // An entry written through a link could land where the link points, outside a folder's checks.
    const parents = name.split("/").slice(0, -1).map((_, i, parts) => parts.slice(0, i + 1).join("/"));
    if (parents.some((p) => links.has(p))) throw refused(`the entry ${JSON.stringify(name)} lies under a symbolic link`);
    const base = name.split("/").at(-1)!;
    // A whiteout removes what an earlier layer put there.
    if (base.startsWith(".wh.")) {
      await rm(join(root, dirname(name), base.slice(4)), { recursive: true, force: true });
      continue;
    }
    const path = join(root, name);
    if (entry.type === "5") {
      await mkdir(path, { recursive: true });
      continue;
    }
    await mkdir(dirname(path), { recursive: true });
    await rm(path, { recursive: true, force: true });
    if (entry.link !== undefined) {
      links.add(name);
      await symlink(entry.link, path);
      continue;
    }
    if (entry.type !== "0" && entry.type !== "7") continue; // devices, fifos: an engine has none to use
    await writeEntry(path, entry.body);
    modes.set(name, entry.mode);
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
export async function markExecutable(root: string, dirs: string[], modes: Modes): Promise<void> {
  for (const [name, mode] of modes) {
    if (!dirs.includes(dirname(name)) || (mode & 0o111) === 0) continue;
    await chmod(join(root, name), 0o755);
  }
}

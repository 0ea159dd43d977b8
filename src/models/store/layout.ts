import { basename, dirname, join } from "node:path";
import { isDigest } from "../reference.ts";

// Where each on-disk concept lives under the store's root (the layout Docker Model Runner uses):
//   blobs/sha256/<hex>              content-addressed files (`.incomplete` while downloading,
//                                   with `.parts`, its parts' progress, when it comes in parts,
//                                   and `.lock`, held by the one process downloading it, with
//                                   `.lock.<random>.broken` marks of holders judged gone until the
//                                   next download has put their partial file out of their reach;
//                                   `.orphan` when its model was deleted while another process
//                                   served it)
//   manifests/sha256/<hex>          raw manifests, by their own digest
//   models.json                     the index: models, their tags and configs
//   models.json.lock                held by the process changing the index
//   leases/<pid>-<token>.json       the blobs each process uses now (see leases.ts)
// A digest is validated before it becomes part of a path, so nothing can name a file outside.

export type Layout = {
  root: string;
  blobsDir: string;
  manifestsDir: string;
  indexFile: string;
  indexLock: string;
  leasesDir: string;
  blob(digest: string): string;
  incompleteBlob(digest: string): string;
  blobProgress(digest: string): string;
  blobLock(digest: string): string;
  orphanMark(digest: string): string;
  /** The digest of a blob's path in this store, or undefined for any other path. */
  digestOfBlob(path: string): string | undefined;
  manifest(digest: string): string;
};

function hexOf(digest: string): string {
  if (!isDigest(digest)) throw new Error(`not a sha256 digest: ${JSON.stringify(digest).slice(0, 100)}`);
  return digest.slice("sha256:".length);
}

export function layout(root: string): Layout {
  const blobsDir = join(root, "blobs", "sha256");
  const manifestsDir = join(root, "manifests", "sha256");
  return {
    root,
    blobsDir,
    manifestsDir,
    indexFile: join(root, "models.json"),
    indexLock: join(root, "models.json.lock"),
    leasesDir: join(root, "leases"),
    blob: (digest) => join(blobsDir, hexOf(digest)),
    incompleteBlob: (digest) => join(blobsDir, `${hexOf(digest)}.incomplete`),
    blobProgress: (digest) => join(blobsDir, `${hexOf(digest)}.parts`),
    blobLock: (digest) => join(blobsDir, `${hexOf(digest)}.lock`),
    orphanMark: (digest) => join(blobsDir, `${hexOf(digest)}.orphan`),
    digestOfBlob(path) {
      const digest = `sha256:${basename(path)}`;
      return dirname(path) === blobsDir && isDigest(digest) ? digest : undefined;
    },
    manifest: (digest) => join(manifestsDir, hexOf(digest)),
  };
}

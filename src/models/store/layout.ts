import { join } from "node:path";
import { isDigest } from "../reference.ts";

// Where each on-disk concept lives under the store's root (the layout Docker Model Runner uses):
//   blobs/sha256/<hex>              content-addressed files (`.incomplete` while downloading,
//                                   with `.parts`, its parts' progress, when it comes in parts)
//   manifests/sha256/<hex>          raw manifests, by their own digest
//   models.json                     the index: models, their tags and configs
// A digest is validated before it becomes part of a path, so nothing can name a file outside.

export type Layout = {
  root: string;
  blobsDir: string;
  manifestsDir: string;
  indexFile: string;
  blob(digest: string): string;
  incompleteBlob(digest: string): string;
  blobProgress(digest: string): string;
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
    blob: (digest) => join(blobsDir, hexOf(digest)),
    incompleteBlob: (digest) => join(blobsDir, `${hexOf(digest)}.incomplete`),
    blobProgress: (digest) => join(blobsDir, `${hexOf(digest)}.parts`),
    manifest: (digest) => join(manifestsDir, hexOf(digest)),
  };
}

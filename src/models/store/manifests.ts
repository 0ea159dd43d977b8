import { createHash } from "node:crypto";
import { removeIfPresent, writeFileAtomic } from "./files.ts";
import type { Layout } from "./layout.ts";

// Raw manifests, kept byte for byte under their own digest: that digest is the model's id.

export const digestOf = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;

export async function putManifest(layout: Layout, bytes: Uint8Array): Promise<string> {
  const digest = digestOf(bytes);
  await writeFileAtomic(layout.manifest(digest), bytes);
  return digest;
}

export const removeManifest = (layout: Layout, digest: string) => removeIfPresent(layout.manifest(digest));

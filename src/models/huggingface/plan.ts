import { parseGGUFQuantLabel } from "@huggingface/gguf";
import { notInRegistry, unsupportedArtifact } from "../errors.ts";
import { describeModel } from "../pull/describe.ts";
import type { PullPlan } from "../pull/plan.ts";
import type { ModelReference } from "../reference.ts";
import { MediaTypes } from "../registry/client.ts";
import { digestOf } from "../store/manifests.ts";
import type { ModelStore } from "../store/store.ts";
import { fileSource, listFiles, type HubFile, type HubOptions } from "./hub.ts";

// A pull of `hf.co/<org>/<repo>[:<quant>]`: the GGUF whose name carries the quantisation of the
// tag (default Q4_K_M) is downloaded and stored under a manifest built here, so that a Hub model
// is a model like any other (and its id stays the same for the same files).

export const DEFAULT_QUANTIZATION = "Q4_K_M";

const baseName = (path: string) => path.slice(path.lastIndexOf("/") + 1);
const isGguf = (file: HubFile) => /\.gguf$/i.test(file.path);
const isMmproj = (file: HubFile) => /mmproj/i.test(baseName(file.path));
const quantOf = (file: HubFile) => parseGGUFQuantLabel(baseName(file.path))?.toUpperCase();

/** Picks the weights for `tag`; throws a 404 that lists the quantisations the repository has. */
export function pickWeights(files: HubFile[], tag: string, repository: string): HubFile {
  const weights = files.filter((f) => isGguf(f) && !isMmproj(f));
  const wanted = tag === "latest" ? DEFAULT_QUANTIZATION : tag.toUpperCase();
  const matches = weights.filter((f) => quantOf(f) === wanted).sort((a, b) => a.path.localeCompare(b.path));
  if (matches.length === 0 && tag === "latest" && weights.length === 1) return weights[0]!;
  if (matches.length === 0) {
    const available = [...new Set(weights.map((f) => quantOf(f) ?? baseName(f.path)))].sort();
    throw notInRegistry(
      `no GGUF file for quantization ${wanted} in ${repository}; available: ${available.join(", ") || "none"}`,
    );
  }
  if (/-\d{5}-of-\d{5}\.gguf$/i.test(matches[0]!.path)) throw unsupportedArtifact(`sharded GGUF files are not supported (${repository})`);
  return matches[0]!;
}

function withDigest(file: HubFile): HubFile & { digest: string } {
  if (!file.digest) throw unsupportedArtifact(`${file.path} has no sha256 in the Hub's file list (not an LFS file)`);
  return file as HubFile & { digest: string };
}

function buildArtifact(weights: HubFile & { digest: string }, mmproj?: HubFile & { digest: string }): { manifest: Uint8Array; config: Uint8Array } {
  const layers = [weights, mmproj].filter((f) => f !== undefined);
  const config = new TextEncoder().encode(
    JSON.stringify({ config: { format: "gguf" }, descriptor: {}, rootfs: { type: "rootfs", diff_ids: layers.map((l) => l.digest) } }),
  );
  const manifest = {
    schemaVersion: 2,
    mediaType: MediaTypes.manifest,
    config: { mediaType: MediaTypes.configs[0], digest: digestOf(config), size: config.byteLength },
    layers: layers.map((l) => ({ mediaType: l === weights ? MediaTypes.gguf : MediaTypes.mmproj, digest: l.digest, size: l.size })),
  };
  return { manifest: new TextEncoder().encode(JSON.stringify(manifest)), config };
}

export async function planHubPull(store: ModelStore, reference: ModelReference, options: HubOptions, signal: AbortSignal): Promise<PullPlan> {
  const repository = reference.remotePath;
  const files = await listFiles(options, repository, signal);
  const weights = withDigest(pickWeights(files, reference.tag, repository));
  const projector = files.find((f) => isGguf(f) && isMmproj(f));
  const mmproj = projector && withDigest(projector);
  const chosen = [weights, mmproj].filter((f) => f !== undefined);
  const { manifest, config: configBytes } = buildArtifact(weights, mmproj);
  const configDigest = digestOf(configBytes);
  return {
    key: reference.key,
    id: digestOf(manifest),
    manifest,
    layers: chosen.map((f) => ({ digest: f.digest, size: f.size, source: fileSource(options, repository, f) })),
    config: configDigest,
    describe: async () => {
      // Kept, so that the model can be pushed as the artifact its manifest names.
      await store.putBlob(configBytes);
      const files = { gguf: [weights.digest], ...(mmproj ? { mmproj: mmproj.digest } : {}), config: configDigest };
      const config = quantOf(weights) ? { quantization: quantOf(weights)! } : {};
      return describeModel(store, files, new Map(chosen.map((f) => [f.digest, f.size])), { config });
    },
  };
}

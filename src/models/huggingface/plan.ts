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
// tag (default Q4_K_M), or every shard of it when it is split (`<name>-00001-of-00003.gguf`, as
// llama.cpp's gguf-split names them), is downloaded and stored under a manifest built here (the
// shards as GGUF layers in order), so that a Hub model is a model like any other (and its id
// stays the same for the same files).

export const DEFAULT_QUANTIZATION = "Q4_K_M";

const baseName = (path: string) => path.slice(path.lastIndexOf("/") + 1);
const isGguf = (file: HubFile) => /\.gguf$/i.test(file.path);
const isMmproj = (file: HubFile) => /mmproj/i.test(baseName(file.path));
const quantOf = (file: HubFile) => parseGGUFQuantLabel(baseName(file.path))?.toUpperCase();

const SHARD = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i;

/** Every shard of the split file `first` is, in order; a 404 naming the first one the repository lacks. */
function shardsOf(first: HubFile, files: HubFile[], repository: string): HubFile[] {
  const [, prefix, , count] = SHARD.exec(first.path)!;
  const byNumber = new Map(files.flatMap((f) => {
    const match = SHARD.exec(f.path);
    return match && match[1] === prefix && match[3] === count ? [[Number(match[2]), f] as const] : [];
  }));
  return Array.from({ length: Number(count) }, (_, i) => {
    const shard = byNumber.get(i + 1);
    if (!shard) throw notInRegistry(`${repository} lacks shard ${i + 1} of ${Number(count)} of ${baseName(prefix!)} (${baseName(prefix!)}-${String(i + 1).padStart(5, "0")}-of-${count}.gguf)`);
    return shard;
  });
}

/** Picks the weights for `tag` (every shard, in order, of split ones); throws a 404 that lists the quantisations the repository has. */
export function pickWeights(files: HubFile[], tag: string, repository: string): HubFile[] {
  const weights = files.filter((f) => isGguf(f) && !isMmproj(f));
  const wanted = tag === "latest" ? DEFAULT_QUANTIZATION : tag.toUpperCase();
  const matches = weights.filter((f) => quantOf(f) === wanted).sort((a, b) => a.path.localeCompare(b.path));
  if (matches.length === 0 && tag === "latest" && weights.length === 1) return [weights[0]!];
  if (matches.length === 0) {
    const available = [...new Set(weights.map((f) => quantOf(f) ?? baseName(f.path)))].sort();
    throw notInRegistry(
      `no GGUF file for quantization ${wanted} in ${repository}; available: ${available.join(", ") || "none"}`,
    );
  }
  // A whole file, where the repository has one as well as shards.
  const whole = matches.find((f) => !SHARD.test(f.path));
  return whole ? [whole] : shardsOf(matches[0]!, matches, repository);
}

function withDigest(file: HubFile): HubFile & { digest: string } {
  if (!file.digest) throw unsupportedArtifact(`${file.path} has no sha256 in the Hub's file list (not an LFS file)`);
  return file as HubFile & { digest: string };
}

function buildArtifact(weights: (HubFile & { digest: string })[], mmproj?: HubFile & { digest: string }): { manifest: Uint8Array; config: Uint8Array } {
  const layers = [...weights, mmproj].filter((f) => f !== undefined);
  const config = new TextEncoder().encode(
    JSON.stringify({ config: { format: "gguf" }, descriptor: {}, rootfs: { type: "rootfs", diff_ids: layers.map((l) => l.digest) } }),
  );
  const manifest = {
    schemaVersion: 2,
    mediaType: MediaTypes.manifest,
    config: { mediaType: MediaTypes.configs[0], digest: digestOf(config), size: config.byteLength },
    layers: layers.map((l) => ({ mediaType: l === mmproj ? MediaTypes.mmproj : MediaTypes.gguf, digest: l.digest, size: l.size })),
  };
  return { manifest: new TextEncoder().encode(JSON.stringify(manifest)), config };
}

export async function planHubPull(store: ModelStore, reference: ModelReference, options: HubOptions, signal: AbortSignal): Promise<PullPlan> {
  const repository = reference.remotePath;
  const files = await listFiles(options, repository, signal);
  const weights = pickWeights(files, reference.tag, repository).map(withDigest);
  const projector = files.find((f) => isGguf(f) && isMmproj(f));
  const mmproj = projector && withDigest(projector);
  const chosen = [...weights, mmproj].filter((f) => f !== undefined);
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
      const files = { gguf: weights.map((w) => w.digest), ...(mmproj ? { mmproj: mmproj.digest } : {}), config: configDigest };
      const quantization = quantOf(weights[0]!);
      const config = quantization ? { quantization } : {};
      return describeModel(store, files, new Map(chosen.map((f) => [f.digest, f.size])), { config });
    },
  };
}

import { gguf, GGMLFileQuantizationType } from "@huggingface/gguf";
import { unsupportedArtifact } from "./errors.ts";
import type { ModelConfig } from "./store/model-index.ts";

// The model's `config`, read from the GGUF header of the stored weights with @huggingface/gguf
// (only the header is read, not the tensors). Values are shown as Docker Model Runner shows
// them: `361.82M` parameters, `256.35MiB` size, header values as strings, long arrays left out.

const LONG_ARRAY = 16;

export function formatParameters(count: number): string {
  const units: [number, string][] = [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]];
  const [scale, unit] = units.find(([s]) => count >= s) ?? [1, ""];
  return `${(count / scale).toFixed(2)}${unit}`;
}

export function formatSize(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(2)}${units[unit]}`;
}

function headerValue(value: unknown): string | undefined {
  if (Array.isArray(value)) return value.length > LONG_ARRAY ? undefined : JSON.stringify(value, (_, v) => (typeof v === "bigint" ? v.toString() : v));
  if (value === undefined || value === null) return undefined;
  return String(value);
}

export function quantizationName(fileType: unknown): string | undefined {
  if (typeof fileType !== "number") return undefined;
  const name = (GGMLFileQuantizationType as unknown as Record<number, string>)[fileType];
  return name ?? undefined;
}

const counted = (metadata: object, key: string) => {
  const value = (metadata as Record<string, unknown>)[key];
  return typeof value === "number" || typeof value === "bigint" ? Number(value) : undefined;
};

/**
 * Checks that `shards` are the files after the first of one model split as llama.cpp splits it
 * (gguf-split): the first declares how many files there are and how many tensors all hold, and
 * each says which it is. Returns the parameters they hold. A model whose files do not fit
 * together would fail to load only when a runner starts: it is refused here, with what is wrong.
 */
async function shardParameters(first: object, tensorsInFirst: number, shards: string[]): Promise<number> {
  const count = shards.length + 1;
  const declared = counted(first, "split.count") ?? 1;
  if (declared !== count) {
    throw unsupportedArtifact(count === 1 ? `the weights are the first of ${declared} split files, and the others are missing` : `the weights come in ${count} files, but their first says the model is split in ${declared}`);
  }
  let parameters = 0;
  let tensors = tensorsInFirst;
  for (const [i, path] of shards.entries()) {
    const parsed = await gguf(path, { allowLocalFile: true, computeParametersCount: true }).catch((error: Error) => {
      throw unsupportedArtifact(`file ${i + 2} of the ${count} split weight files is not a GGUF file (${error.message})`);
    });
    const no = counted(parsed.metadata, "split.no");
    if (no !== i + 1 || counted(parsed.metadata, "split.count") !== count) {
      const says = no === undefined ? "no shard number" : `shard ${no + 1} of ${counted(parsed.metadata, "split.count")}`;
      throw unsupportedArtifact(`file ${i + 2} of the ${count} split weight files is not shard ${i + 2} (its header says ${says})`);
    }
    parameters += parsed.parameterCount;
    tensors += Number(parsed.metadata.tensor_count);
  }
  const expected = counted(first, "split.tensors.count");
  if (count > 1 && expected !== tensors) throw unsupportedArtifact(`the ${count} split weight files hold ${tensors} tensors, their first says ${expected}`);
  return parameters;
}

/**
 * Reads the header of a local GGUF file; `size` is the total of the model's weight files, and
 * `shards` the files after the first when it is split in several (checked to fit together).
 */
export async function readGgufConfig(path: string, size: number, shards: string[] = []): Promise<ModelConfig> {
  const parsed = await gguf(path, { allowLocalFile: true, computeParametersCount: true });
  const shardParameterCount = await shardParameters(parsed.metadata, Number(parsed.metadata.tensor_count), shards);
  const header: Record<string, string> = {};
  for (const [key, value] of Object.entries(parsed.metadata)) {
    if (key === "version" || key === "tensor_count" || key === "kv_count") continue;
    const text = headerValue(value);
    if (text !== undefined) header[key] = text;
  }
  const metadata = parsed.metadata as Record<string, unknown>;
  const architecture = typeof metadata["general.architecture"] === "string" ? (metadata["general.architecture"] as string) : undefined;
  const contextLength = architecture ? metadata[`${architecture}.context_length`] : undefined;
  const quantization = quantizationName(metadata["general.file_type"]);
  return {
    format: "gguf",
    ...(quantization ? { quantization } : {}),
    parameters: formatParameters(parsed.parameterCount + shardParameterCount),
    ...(architecture ? { architecture } : {}),
    size: formatSize(size),
    ...(typeof contextLength === "number" || typeof contextLength === "bigint" ? { context_size: Number(contextLength) } : {}),
    gguf: header,
  };
}

import { gguf, GGMLFileQuantizationType } from "@huggingface/gguf";
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

/** Reads the header of a local GGUF file; `size` is the total of the model's weight files. */
export async function readGgufConfig(path: string, size: number): Promise<ModelConfig> {
  const parsed = await gguf(path, { allowLocalFile: true, computeParametersCount: true });
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
    parameters: formatParameters(parsed.parameterCount),
    ...(architecture ? { architecture } : {}),
    size: formatSize(size),
    ...(typeof contextLength === "number" || typeof contextLength === "bigint" ? { context_size: Number(contextLength) } : {}),
    gguf: header,
  };
}

import { decisionMethod, systemOneMethod } from "../../models/decisions.ts";
import type { StoredModel } from "../../models/index.ts";
import type { ProgressShape } from "../../models/index.ts";
import type { PullEvent } from "../../models/pull/plan.ts";
import type { RunnerInfo } from "../../scheduler/scheduler.ts";

// Our models, runners and pull progress as Ollama's /api/tags, /api/show, /api/ps and /api/pull
// show them. Pure, like translate.ts.

export type Sized = { model: StoredModel; size: number };

/** Ollama shows a digest as bare hex. */
const hex = (id: string) => id.replace(/^sha256:/, "");
const iso = (seconds: number) => new Date(seconds * 1000).toISOString();

export function details(model: StoredModel): Record<string, unknown> {
  const family = model.config.architecture ?? model.config.gguf?.["general.architecture"] ?? "";
  return {
    parent_model: "",
    format: model.config.format ?? "gguf",
    family,
    families: family ? [family] : [],
    parameter_size: model.config.parameters ?? "",
    quantization_level: model.config.quantization ?? "",
  };
}

/** One entry per tag, as Ollama lists each name a model has. */
export function tagEntries({ model, size }: Sized): Record<string, unknown>[] {
  return (model.tags.length ? model.tags : [model.id]).map((name) => ({
    name,
    model: name,
    modified_at: iso(model.created),
    size,
    digest: hex(model.id),
    details: details(model),
  }));
}

/** GGUF header values are stored as text: numbers and booleans go back to their JSON types. */
function headerValue(text: string): unknown {
  if (/^-?\d+(\.\d+)?(e[+-]?\d+)?$/i.test(text)) return Number(text);
  if (text === "true" || text === "false") return text === "true";
  return text;
}

/** What the model can do, as Ollama names it (clients show it, and pick models by it). */
export function capabilities(model: StoredModel): string[] {
  const gguf = model.config.gguf ?? {};
  const arch = model.config.architecture ?? gguf["general.architecture"];
  const pooling = Number(gguf[`${arch}.pooling_type`] ?? 0);
  const found = [pooling > 0 ? "embedding" : "completion"];
  if (model.mmprojPath) found.push("vision");
  const template = gguf["tokenizer.chat_template"] ?? "";
  if (template.includes("tools")) found.push("tools");
  if (/think|reasoning/.test(template)) found.push("thinking");
  // Answers /v1/decisions and /v1/systemone (see src/decisions/): the way is in /api/show's `decisions`.
  if (decisionMethod(model)) found.push("decisions");
  return found;
}

export function showAnswer(model: StoredModel, name: string): Record<string, unknown> {
  const gguf = model.config.gguf ?? {};
  const info = Object.fromEntries(Object.entries(gguf).filter(([key]) => !key.startsWith("tokenizer.")).map(([key, value]) => [key, headerValue(value)]));
  return {
    license: "",
    modelfile: `# Modelfile of ${name}\nFROM ${name}\n`,
    parameters: "",
    template: gguf["tokenizer.chat_template"] ?? "",
    details: details(model),
    model_info: info,
    capabilities: capabilities(model),
    ...(decisionMethod(model) ? { decisions: decisionMethod(model), systemone: systemOneMethod(model) } : {}),
    modified_at: iso(model.created),
  };
}

/** Ollama shows a model kept forever with an expiry far in the future. */
const FOREVER = "2318-01-01T00:00:00.000Z";

function expiresAt(runner: RunnerInfo, keepAliveMs: number, now: number): string {
  if (!Number.isFinite(keepAliveMs)) return FOREVER;
  const from = runner.inUse > 0 || runner.waiting > 0 ? now : runner.lastUsed;
  return new Date(from + keepAliveMs).toISOString();
}

/** The loaded models (one line per model, whatever its runners' modes). */
export function psEntries(runners: RunnerInfo[], models: Map<string, Sized>, keepAliveMs: (text: string) => number, now: number): Record<string, unknown>[] {
  const seen = new Set<string>();
  const entries: Record<string, unknown>[] = [];
  for (const runner of runners) {
    const sized = models.get(runner.modelId);
    if (!sized || seen.has(runner.modelId)) continue;
    seen.add(runner.modelId);
    entries.push({
      name: runner.model,
      model: runner.model,
      size: sized.size,
      digest: hex(runner.modelId),
      details: details(sized.model),
      expires_at: expiresAt(runner, keepAliveMs(runner.keepAlive), now),
      size_vram: 0,
    });
  }
  return entries;
}

/** A pull event as Ollama's progress lines (`status`, `digest`, `total`, `completed`), or an `error` line. */
export function pullLines(event: PullEvent): Record<string, unknown>[] {
  if (event.type === "error") return [{ error: event.message }];
  if (event.type === "success") return [{ status: "verifying sha256 digest" }, { status: "writing manifest" }, { status: "success" }];
  if (event.type === "warning") return [{ status: event.message }];
  if (!event.layer) return [];
  const { id, size, current } = event.layer;
  return [{ status: `pulling ${hex(id).slice(0, 12)}`, digest: id, total: size, completed: current }];
}

/** A pull's progress as Ollama streams it: a first status line, then each event's lines. */
export const OLLAMA_PROGRESS: ProgressShape = { first: [{ status: "pulling manifest" }], lines: pullLines };

import type { StoredModel } from "./index.ts";

// Which way a model answers decisions (src/decisions/), as /v1/models, /models/{name} and Ollama's
// /api/show say it: a property of the stored model, read from its GGUF header.

/** A chat model's next-token probabilities over the labels, not a calibrated decision model's. */
export const CHAT_METHOD = "chat-next-token";
/** The engine's own answer, for a decision model on an engine that serves it. */
export const ENGINE_METHOD = "engine";

/** The header field of a "decision model" (llama.cpp's own kind, for its server's `/v1/systemone`). */
export const DECISION_TYPE_KEY = "decision.type";

/**
 * `chat-next-token` for a model that generates text (its next-token probabilities over the labels:
 * see src/decisions/slots.ts); undefined for one that only embeds or ranks (a pooling type in its GGUF), which
 * cannot be asked.
 */
export function decisionMethod(model: StoredModel): typeof CHAT_METHOD | undefined {
  const gguf = model.config.gguf ?? {};
  const arch = model.config.architecture ?? gguf["general.architecture"];
  return Number(gguf[`${arch}.pooling_type`] ?? 0) > 0 ? undefined : CHAT_METHOD;
}

export const isDecisionModel = (model: StoredModel): boolean => model.config.gguf?.[DECISION_TYPE_KEY] !== undefined;

/**
 * How `/v1/systemone` is answered: a decision model's is asked of the engine (`engine`), where the
 * engine serves that route (else as a chat model's, each answer's header says which); any other
 * model's as its decisions.
 */
export const systemOneMethod = (model: StoredModel) => (isDecisionModel(model) ? ENGINE_METHOD : decisionMethod(model));

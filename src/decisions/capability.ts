import type { StoredModel } from "../models/index.ts";
import { CHAT_METHOD } from "./method.ts";

// Which way a model answers decisions, as /v1/models, /models/{name} and Ollama's /api/show say it.

/**
 * `chat-next-token` for a model that generates text (its next-token probabilities over the labels:
 * see ask.ts); undefined for one that only embeds or ranks (a pooling type in its GGUF), which
 * cannot be asked. The llama-server we run serves no decisions of its own (`/v1/systemone`, for
 * the "decision models" whose GGUF names a `decision.type`): such a model is asked as a chat
 * model too, and says so here.
 */
export function decisionMethod(model: StoredModel): typeof CHAT_METHOD | undefined {
  const gguf = model.config.gguf ?? {};
  const arch = model.config.architecture ?? gguf["general.architecture"];
  return Number(gguf[`${arch}.pooling_type`] ?? 0) > 0 ? undefined : CHAT_METHOD;
}

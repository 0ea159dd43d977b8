// How decisions were computed, named in a header of every answer (see docs/api.md, Decisions):
// a chat model's next-token probabilities over the labels, not a calibrated decision model's; or
// the engine's own answer, for a decision model on an engine that serves it.
export const METHOD_HEADER = "x-llamadock-decision-method";
export const CHAT_METHOD = "chat-next-token";
export const ENGINE_METHOD = "engine";

/** How many of the runner's slots asked a request's questions at once (see slots.ts). */
export const SLOTS_HEADER = "x-llamadock-decision-slots";

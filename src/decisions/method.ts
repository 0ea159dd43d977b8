// How decisions were computed, named in a header of every answer (see docs/api.md, Decisions):
// the methods are src/models/decisions.ts's.
export { CHAT_METHOD, ENGINE_METHOD } from "../models/decisions.ts";
export const METHOD_HEADER = "x-llamadock-decision-method";

/** How many of the runner's slots asked a request's questions at once (see slots.ts). */
export const SLOTS_HEADER = "x-llamadock-decision-slots";

import { readJson } from "../http/body.ts";
import type { Route } from "../http/router.ts";
import { counted, ENGINE, type InferenceDeps } from "../inference/routes.ts";
import { remoteMedia } from "../inference/body-policy.ts";
import { askModel } from "./ask.ts";
import { CHAT_METHOD, ENGINE_METHOD, METHOD_HEADER, SLOTS_HEADER } from "./method.ts";
import { DecisionBody, openAiAsk, openAiDecision } from "./openai.ts";
import { SystemOneBody, systemOneAnswer, systemOneAsk } from "./systemone.ts";

// Decisions under every base path of the OpenAI-compatible endpoints: OpenAI's `decisions` and
// System One's `systemone`, both answered by any chat model we serve (ask.ts, slots.ts, question.ts),
// a decision model's System One by its engine where it serves it (engine.ts).

const BASES = [`/engines/${ENGINE}/v1`, "/engines/v1", "/v1"];

/** The answer, with headers that name how it was computed (a chat model's next token, not a decision model) and in how many slots. */
const answered = (body: unknown, slots: number) => Response.json(body, { headers: { [METHOD_HEADER]: CHAT_METHOD, [SLOTS_HEADER]: String(slots) } });

export function decisionRoutes(deps: InferenceDeps): Route[] {
  const decisions = async (request: Request) => {
    const body = await readJson(request, deps.bodyLimit, DecisionBody);
    // Images by URL judged now (400 for one never fetched), fetched once the model is admitted.
    const remote = remoteMedia(body, deps.bodyPolicy);
    const decided = await askModel(deps, request, body.model, { remote, build: () => openAiAsk(body) });
    if ("engine" in decided) throw new Error("an engine's answer to a request that named none");
    return answered(openAiDecision(decided), decided.slots);
  };
  const systemone = async (request: Request) => {
    const body = await readJson(request, deps.bodyLimit, SystemOneBody);
    // A decision model's is asked of the engine first, as it came (see engine.ts).
    const decided = await askModel(deps, request, body.model, { remote: [], build: () => systemOneAsk(body) }, body);
    if ("engine" in decided) return Response.json(decided.engine.json, { status: decided.engine.status, headers: { [METHOD_HEADER]: ENGINE_METHOD } });
    return answered(systemOneAnswer(decided), decided.slots);
  };
  return BASES.flatMap((base): Route[] => [
    { method: "POST", path: `${base}/decisions`, handle: (request) => counted(deps.metrics, "decisions", () => decisions(request)) },
    { method: "POST", path: `${base}/systemone`, handle: (request) => counted(deps.metrics, "systemone", () => systemone(request)) },
  ]);
}

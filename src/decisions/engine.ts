import { anySignal } from "../http/abort.ts";
import { requestTimedOut } from "../inference/bounds.ts";
import type { Lease } from "../scheduler/runner.ts";
import type { RunnerProcess } from "../scheduler/types.ts";
import { runnerCalls } from "./question.ts";

// System One asked of the engine itself: llama.cpp's server answers `/v1/systemone` for models
// built as decision models (a `decision.type` in their GGUF), from the model's own decision head.
// Ours (v0.5.0) has no such route; a newer one may. So a decision model's request goes to its
// runner first, as it came; a runner that answers 404 has no such route, and is not asked again:
// its questions are asked as a chat model's (slots.ts).

/** Runners (by their fetch, one per process) that answered 404: their engine does not serve System One. */
const lacking = new WeakSet<RunnerProcess["fetch"]>();

export type EngineAnswer = { status: number; json: Record<string, unknown> };

/** The engine's answer to `body`, or undefined when its runner does not serve `/v1/systemone`. */
export async function askEngine(lease: Lease, body: unknown, run: { model: string; request: Request; timeoutMs: number; key: string | undefined }): Promise<EngineAnswer | undefined> {
  if (lacking.has(lease.fetch)) return undefined;
  const call = anySignal([run.request.signal, lease.died]);
  const timer = setTimeout(() => call.abort(requestTimedOut(run.model, run.timeoutMs)), run.timeoutMs);
  try {
    const answer = await runnerCalls(lease, call.signal, run.model, run.request.signal, run.key).post("/v1/systemone", body);
    if (answer.status !== 404) return answer;
    lacking.add(lease.fetch);
    return undefined;
  } finally {
    clearTimeout(timer);
    call.dispose();
  }
}

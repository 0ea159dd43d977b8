import { badRequest, HttpError } from "../http/errors.ts";
import type { MediaRef } from "../inference/media/refs.ts";
import type { InferenceDeps } from "../inference/routes.ts";
import { bothTimers } from "../inference/usage/meter.ts";
import { LOCAL_CALLER } from "../keys/keyring.ts";
import { modelNotFound } from "../models/errors.ts";
import { resolveOr404 } from "../models/lookup.ts";
import { decisionMethod, isDecisionModel } from "../models/decisions.ts";
import { askEngine, type EngineAnswer } from "./engine.ts";
import { hasMedia, type Answer, type Ask } from "./core.ts";
import { askAll, type Usage } from "./slots.ts";

// A decision request as any inference request: its model found and admitted for the caller's key,
// its runner leased in the caller's turn (loaded if need be), counted once in the usage ledger
// and the latency figures with all of its questions' tokens. The questions: slots.ts.

export type { Usage };
export type Decided = { model: string; ask: Ask; answers: Answer[]; usage: Usage; slots: number };

/**
 * A request's questions, made once its model is found and admitted: its images given by URL are
 * fetched then (see inference/media/fetch.ts), never for a request refused before.
 */
export type AskSource = { remote: MediaRef[]; build(): Ask };

/**
 * The answers; or, given `native` (a System One body, as it came) and a decision model, the
 * engine's own answer where its runner serves `/v1/systemone` (engine.ts).
 */
export async function askModel(deps: InferenceDeps, request: Request, requested: string, source: AskSource, native?: unknown): Promise<Decided | { engine: EngineAnswer }> {
  const startedAt = performance.now();
  const caller = deps.identify?.(request) ?? LOCAL_CALLER;
  let name: string | undefined;
  let ticket: ReturnType<NonNullable<InferenceDeps["meter"]>["admit"]> | undefined;
  try {
    const model = await resolveOr404(deps.store, requested);
    if (deps.admits && !deps.admits(model.id)) throw modelNotFound(requested);
    const named = (name = model.tags[0] ?? model.id);
    if (!decisionMethod(model)) throw badRequest("model_cannot_decide", `model ${named} embeds or ranks and generates no text: decisions need a chat model`);
    // Images by URL are built into the questions once fetched; inline ones are there now. Either
    // way the projector is checked and the key admitted first, as chat does: a request refused
    // (no projector, the key past its limits) makes the server fetch nothing.
    const remote = source.remote.length > 0;
    const inline = remote ? undefined : source.build();
    const images = inline === undefined || hasMedia(inline);
    if (images && !model.mmprojPath) {
      throw badRequest("images_not_supported", `model ${named} has no projector for images: decisions about images need a model that reads them`);
    }
    ticket = deps.meter?.admit(caller, named);
    if (remote) await fetchMedia(deps, source.remote, request.signal);
    const ask = inline ?? source.build();
    const wish = { caller: caller.name, lane: "interactive" as const };
    const acquire = (signal: AbortSignal) => deps.scheduler.acquire(model, "completion", signal, wish);
    const first = await acquire(request.signal);
    const timed = deps.metrics.timer(named, startedAt);
    const timer = ticket ? bothTimers(timed, ticket) : timed;
    const key = deps.promptsPerKey ? caller.name : undefined;
    if (native !== undefined && isDecisionModel(model)) {
      const engine = await askEngine(first, native, { model: named, request, timeoutMs: deps.bounds.timeoutMs, key }).catch((error: unknown) => {
        first.release();
        throw error;
      });
      if (engine) {
        first.release();
        // Its usage (`input_tokens`, `output_tokens`) is what the ledger reads.
        timer.end(engine.status < 400, JSON.stringify(engine.json));
        return { engine };
      }
    }
    const runner = deps.scheduler.runners().find((r) => r.modelId === model.id && r.mode === "completion" && r.state === "ready");
    // Slots cut back after each question (tiles.ts) but on a runner the scheduler put on a GPU.
    const run = { model: named, request, timeoutMs: deps.bounds.timeoutMs, slots: runner?.slots ?? 1, acquire, key, tiled: runner?.memory?.where !== "gpu" };
    const { answers, usage, slots: used } = await askAll(run, first, ask);
    // The ledger and the latency figures read llama-server's `timings` of an answer: those of all the questions.
    timer.end(true, JSON.stringify({ timings: { cache_n: usage.cached, prompt_n: usage.input - usage.cached, predicted_n: usage.output } }));
    // Answered under the name the client gave (as it names the model in its request), counted under the model's own.
    return { model: requested, ask, answers, usage, slots: used };
  } catch (error) {
    if (ticket) ticket.fail();
    else deps.meter?.refused(caller, name);
    throw error;
  }
}

/** Remote images into the body as data: URLs, fetched by us (never by llama-server), when allowed. */
async function fetchMedia(deps: InferenceDeps, remote: MediaRef[], signal: AbortSignal): Promise<void> {
  if (!deps.inlineMedia) throw new HttpError(500, "server_error", "media_fetch_unavailable", "remote media are allowed but cannot be fetched here");
  await deps.inlineMedia(remote, signal);
}

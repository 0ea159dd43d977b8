import * as z from "zod";
import { badRequest } from "../http/errors.ts";
import { readJson } from "../http/body.ts";
import type { Route } from "../http/router.ts";
import { modelNotFound } from "../models/errors.ts";
import type { ModelStore } from "../models/index.ts";
import { ModelTooLarge } from "../scheduler/errors.ts";
import type { FitAnswer, FitRunner } from "../scheduler/api.ts";
import type { Scheduler } from "../scheduler/scheduler.ts";
import type { ModelSettings } from "../scheduler/settings.ts";
import type { Mode } from "../scheduler/types.ts";

// "Will it fit?" (`GET /engines/fit?model=&context=&mode=`, or POST with `{"model","context-size","mode"}`):
// what a load of the model would do now, from the launch's own decision on the estimate and the
// budget, without starting or unloading anything: already loaded, load (alone or beside the
// runners loaded), evict these idle runners first, wait for busy ones, or 507 with the context
// size that would fit.

export type FitDeps = { store: Pick<ModelStore, "resolve">; scheduler: Scheduler };

const FitQuery = z.strictObject({
  model: z.string().trim().min(1, "model is required"),
  // As configure takes it: -1 is the model's own trained context.
  "context-size": z.coerce.number().int().min(-1).max(1 << 24).optional(),
  mode: z.enum(["completion", "embedding", "reranking"], { error: 'mode must be "completion", "embedding" or "reranking"' }).optional(),
});
type FitQuery = z.infer<typeof FitQuery>;

const FIT_BODY_LIMIT = 16 * 1024;

export function fitRoutes({ store, scheduler }: FitDeps): Route[] {
  async function fit(query: FitQuery): Promise<Response> {
    const model = await store.resolve(query.model);
    if (!model) throw modelNotFound(query.model);
    const mode: Mode = query.mode ?? "completion";
    const context = query["context-size"];
    const changes: ModelSettings = context === undefined ? {} : { contextSize: context === -1 ? 0 : context };
    const name = model.tags[0] ?? model.id;
    const [answer, memory] = await Promise.all([scheduler.fit(model, mode, changes).catch(tooLarge), scheduler.memory()]);
    const budget = memory && { where: memory.budget.where, budget_bytes: memory.budget.bytes, used_bytes: memory.usedBytes, free_bytes: Math.max(0, memory.budget.bytes - memory.usedBytes), ...hostBudget(memory) };
    if (answer instanceof ModelTooLarge) {
      const { totalBytes, contextSize, fittingContext } = answer.need;
      const body = { model: name, mode, fits: false, action: "refuse", context_size: contextSize, total_bytes: totalBytes, fitting_context_size: fittingContext ?? null, budget: budget ?? null };
      return Response.json({ error: { message: answer.message, type: answer.type, code: answer.code }, ...body }, { status: 507 });
    }
    return Response.json({ model: name, mode, fits: true, ...fitFields(answer), budget: budget ?? null });
  }

  async function fitGet(request: Request): Promise<Response> {
    const { context, ...rest } = Object.fromEntries(new URL(request.url).searchParams);
    return fit(parsed({ ...rest, ...(context !== undefined ? { "context-size": context } : {}) }));
  }

  async function fitPost(request: Request): Promise<Response> {
    return fit(await readJson(request, FIT_BODY_LIMIT, FitQuery));
  }

  return [
    { method: "GET", path: "/engines/fit", handle: fitGet },
    { method: "POST", path: "/engines/fit", handle: fitPost },
  ];
}

function parsed(query: Record<string, string>): FitQuery {
  const result = FitQuery.safeParse(query);
  if (!result.success) throw badRequest("invalid_request", z.prettifyError(result.error));
  return result.data;
}

/** Beside a GPU budget, the host memory the runners' prompt caches share. */
const hostBudget = ({ budget, hostUsedBytes }: { budget: { hostBytes?: number }; hostUsedBytes: number }) =>
  budget.hostBytes === undefined ? {} : { host_budget_bytes: budget.hostBytes, host_used_bytes: hostUsedBytes };

const tooLarge = (error: unknown) => {
  if (error instanceof ModelTooLarge) return error;
  throw error;
};

const runners = (list: FitRunner[]) => list.map((r) => ({ model: r.model, mode: r.mode, memory_bytes: r.bytes }));

const memoryFields = (m: NonNullable<Extract<FitAnswer, { action: "load" | "evict" | "wait" }>["memory"]>) => ({
  where: m.where,
  total_bytes: m.total,
  weights_bytes: m.weights,
  kv_cache_bytes: m.kvCache,
  compute_bytes: m.compute,
  prompt_cache_bytes: m.promptCache,
  checkpoints_bytes: m.checkpoints,
  host_bytes: m.host,
});

/** The answer in the engine API's snake_case. */
function fitFields(answer: FitAnswer) {
  if (answer.action === "loaded") {
    const { contextSize, slots, memory } = answer.runner;
    return { action: "loaded", context_size: contextSize ?? null, slots: slots ?? null, memory: memory ? memoryFields(memory) : null };
  }
  return {
    action: answer.action,
    // Alone: nothing else stays loaded beside it.
    alone: answer.beside.length === 0,
    context_size: answer.contextSize ?? null,
    slots: answer.slots ?? null,
    memory: answer.memory ? memoryFields(answer.memory) : null,
    beside: runners(answer.beside),
    evicts: runners(answer.evicts),
    waits_for: runners(answer.waitsFor),
  };
}

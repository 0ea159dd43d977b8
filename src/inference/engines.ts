import * as z from "zod";
import { badRequest } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import { modelNotFound } from "../models/errors.ts";
import type { ModelStore } from "../models/index.ts";
import type { RunnerInfo, Scheduler } from "../scheduler/scheduler.ts";
import { ModelSettings, type SettingsStore } from "../scheduler/settings.ts";
import { KEEP_ALIVE_PATTERN } from "../scheduler/policy.ts";
import { readJson as readJsonUpTo } from "../http/body.ts";
import type { InferenceMetrics } from "./metrics.ts";
import { ENGINE } from "./routes.ts";

// Engine management, in Docker Model Runner's shapes: status, running runners, unload, per-model
// settings, and the Prometheus metrics of us and of every runner.

export type EngineDeps = {
  store: Pick<ModelStore, "resolve">;
  scheduler: Scheduler;
  settings: SettingsStore;
  metrics: InferenceMetrics;
  /** llama-server's version, as it reports it; rejects when no binary is usable. */
  engineVersion: () => Promise<string>;
};

const UnloadBody = z.strictObject({
  all: z.boolean().optional(),
  backend: z.string().optional(),
  models: z.array(z.string().min(1)).optional(),
});

const ConfigureBody = z.strictObject({
  model: z.string().trim().min(1, "model is required"),
  mode: z.enum(["completion", "embedding"]).optional(),
  "context-size": z.number().int().nonnegative().optional(),
  slots: z.number().int().min(1).max(64).optional(),
  "runtime-flags": z.array(z.string()).optional(),
  keep_alive: z.union([z.string().regex(KEEP_ALIVE_PATTERN, 'a duration like "5m", "0" or "-1"'), z.number()]).optional(),
});

/** Management bodies are small: a tenth of a mebibyte is plenty. */
const MANAGEMENT_BODY_LIMIT = 100 * 1024;

const readJson = <T>(request: Request, schema: z.ZodType<T>): Promise<T> => readJsonUpTo(request, MANAGEMENT_BODY_LIMIT, schema);

const psEntry = (r: RunnerInfo) => ({
  backend_name: ENGINE,
  model_name: r.model,
  mode: r.mode,
  state: r.state,
  in_use: r.inUse > 0,
  loading: r.state === "loading",
  in_flight: r.inUse,
  waiting: r.waiting,
  last_used: new Date(r.lastUsed).toISOString(),
  keep_alive: r.keepAlive,
});

export function engineRoutes(deps: EngineDeps): Route[] {
  const { scheduler, store } = deps;

  async function status(): Promise<Response> {
    const state = await deps.engineVersion().then(
      (version) => `running llama.cpp version: ${version}`,
      (error: Error) => `error: ${error.message}`,
    );
    return Response.json({ [ENGINE]: state });
  }

  async function unload(request: Request): Promise<Response> {
    const body = await readJson(request, UnloadBody);
    if (body.backend !== undefined && body.backend !== "" && body.backend !== ENGINE) {
      return Response.json({ unloaded_runners: 0 });
    }
    const ids = new Set<string>();
    for (const reference of body.models ?? []) {
      const model = await store.resolve(reference);
      if (model) ids.add(model.id);
    }
    const unloaded = await scheduler.unload((r) => body.all === true || ids.has(r.modelId));
    return Response.json({ unloaded_runners: unloaded });
  }

  async function configure(request: Request): Promise<Response> {
    const body = await readJson(request, ConfigureBody);
    const model = await store.resolve(body.model);
    if (!model) throw modelNotFound(body.model);
    const changes = ModelSettings.safeParse({
      contextSize: body["context-size"],
      slots: body.slots,
      keepAlive: body.keep_alive === undefined ? undefined : String(body.keep_alive),
      runtimeFlags: body["runtime-flags"],
    });
    if (!changes.success) throw badRequest("invalid_settings", z.prettifyError(changes.error));
    const settings = await deps.settings.update(model.id, dropUndefined(changes.data));
    scheduler.reload(model);
    scheduler.preload(model, body.mode ?? "completion");
    return Response.json({ model: model.tags[0] ?? model.id, settings: publicSettings(settings) }, { status: 202 });
  }

  async function metrics(): Promise<Response> {
    const text = deps.metrics.render(scheduler.runners(), await scheduler.scrape("/metrics"));
    return new Response(text, { headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" } });
  }

  return [
    { method: "GET", path: "/engines/status", handle: status },
    { method: "GET", path: "/engines/ps", handle: () => Response.json(scheduler.runners().map(psEntry)) },
    { method: "POST", path: "/engines/unload", handle: unload },
    { method: "POST", path: "/engines/_configure", handle: configure },
    { method: "GET", path: "/metrics", handle: metrics },
  ];
}

const publicSettings = (s: ModelSettings) =>
  dropUndefined({ "context-size": s.contextSize, slots: s.slots, keep_alive: s.keepAlive, "runtime-flags": s.runtimeFlags });

function dropUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

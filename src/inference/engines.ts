import { parse as parseShell } from "shell-quote";
import * as z from "zod";
import { badRequest } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import { modelNotFound } from "../models/errors.ts";
import type { ModelStore } from "../models/index.ts";
import type { RunnerInfo, Scheduler } from "../scheduler/scheduler.ts";
import type { ModelRef } from "../scheduler/types.ts";
import { ModelSettings, type SettingsStore } from "../scheduler/settings.ts";
import { KEEP_ALIVE_PATTERN } from "../scheduler/policy.ts";
import { BYTES_PATTERN, parseBytes } from "../scheduler/memory/budget.ts";
import { readJson as readJsonUpTo } from "../http/body.ts";
import type { Caller } from "../keys/keyring.ts";
import type { InferenceMetrics } from "./metrics.ts";
import { ENGINE } from "./routes.ts";
import type { DiskUsage } from "./disk.ts";
import { RUNNER_FIGURES_MS, sharedFor } from "./scrape-cache.ts";

// Engine management, in Docker Model Runner's shapes: status, running runners, unload, per-model
// settings, and the Prometheus metrics of us and of every runner.

export type EngineDeps = {
  store: Pick<ModelStore, "resolve">;
  scheduler: Scheduler;
  settings: SettingsStore;
  metrics: InferenceMetrics;
  /** How long one reading of the runners' figures serves every scrape (default RUNNER_FIGURES_MS). */
  runnerFiguresMs?: number;
  /** llama-server's version, as it reports it; rejects when no binary is usable. */
  engineVersion: () => Promise<string>;
  /** Bytes on disk of the store and of the engine (DMR's `df`). */
  diskUsage: () => Promise<DiskUsage>;
  /** Refuses (a 400 naming the build) settings the build they would run on cannot take; none: unchecked. */
  checkSettings?: (settings: ModelSettings) => Promise<void>;
  /** Moves a model's loaded runners to the build its settings now name, no request dropped. */
  moveToEngine?: (model: ModelRef) => void;
  /** Who asks: /metrics shows an admin every key's series, a key its own (none given: all). */
  identify?: (request: Request) => Caller;
};

const UnloadBody = z.strictObject({
  all: z.boolean().optional(),
  backend: z.string().optional(),
  models: z.array(z.string().min(1)).optional(),
});

// Docker Model Runner's configure body, as its CLI and `docker model compose` send it. Unknown keys
// are ignored, as DMR ignores them, so a newer client's extra field is no error.
const ConfigureBody = z.looseObject({
  model: z.string().trim().min(1, "model is required"),
  mode: z.enum(["completion", "embedding", "reranking"], { error: 'mode must be "completion", "embedding" or "reranking"' }).optional(),
  // -1: DMR's "no limit", here the model's own trained context (0 to llama-server).
  "context-size": z.number().int().min(-1).optional(),
  slots: z.number().int().min(1).max(64).optional(),
  threads: z.number().int().min(1).max(1024).optional(),
  "runtime-flags": z.array(z.string()).optional(),
  // One string split as a shell would; DMR reads it only when runtime-flags is empty.
  "raw-runtime-flags": z.string().optional(),
  keep_alive: z.union([z.string().regex(KEEP_ALIVE_PATTERN, 'a duration like "5m", "0" or "-1"'), z.number()]).optional(),
  pooling: z.enum(["mean", "cls", "last", "rank"]).optional(),
  // Ours: the runner's host prompt cache, a size ("256MiB", "0": off) or bytes, rounded up to whole MiB.
  "cache-ram": z.union([z.string().regex(BYTES_PATTERN, 'a size like "256MiB" or "0"').transform(parseBytes), z.number().int().min(0)]).optional(),
  speculative: z
    .looseObject({
      draft_model: z.string().trim().min(1, "speculative.draft_model is required"),
      num_tokens: z.number().int().min(1).max(64).optional(),
      min_acceptance_rate: z.number().min(0).max(1).optional(),
    })
    .optional(),
  llamacpp: z.looseObject({ "reasoning-budget": z.number().int().min(-1).optional() }).optional(),
  // Ours: the llama.cpp build its runners launch on (a build's tag, reference or digest; "builtin").
  engine: z.string().trim().min(1).max(300).optional(),
});
type ConfigureBody = z.infer<typeof ConfigureBody>;

const MIB = 1024 * 1024;

/** Management bodies are small: a tenth of a mebibyte is plenty. */
const MANAGEMENT_BODY_LIMIT = 100 * 1024;

const readJson = <T>(request: Request, schema: z.ZodType<T>): Promise<T> => readJsonUpTo(request, MANAGEMENT_BODY_LIMIT, schema);

/** The llama.cpp build a runner runs, and the move to another that failed (it serves on, and a request tries again from retry_at). */
const engineFields = (r: RunnerInfo) => ({
  engine: r.engine?.name ?? "builtin",
  ...(r.engine ? { engine_version: r.engine.version } : {}),
  ...(r.failedMove ? { engine_move_failed: { engine: r.failedMove.engine, message: r.failedMove.why, tries: r.failedMove.tries, retry_at: new Date(r.failedMove.retryAt).toISOString() } } : {}),
});

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
  threads: r.threads,
  ...engineFields(r),
  ...(r.contextSize !== undefined ? { context_size: r.contextSize } : {}),
  // The slots share the context: a request gets context_size / slots (llama-server's --parallel).
  ...(r.slots !== undefined ? { slots: r.slots } : {}),
  // The estimate it was launched with, in bytes, and where that memory is.
  ...(r.memory
    ? {
        memory: {
          where: r.memory.where,
          total_bytes: r.memory.total,
          weights_bytes: r.memory.weights,
          kv_cache_bytes: r.memory.kvCache,
          compute_bytes: r.memory.compute,
          // llama-server's host prompt cache and context checkpoints; beside a GPU, host_bytes.
          prompt_cache_bytes: r.memory.promptCache,
          checkpoints_bytes: r.memory.checkpoints,
          host_bytes: r.memory.host,
        },
      }
    : {}),
});

/** A model's `engine` that means none of its own: the default engine's runners. */
const FOLLOW_DEFAULT = "default";

export function engineRoutes(deps: EngineDeps): Route[] {
  const { scheduler, store } = deps;

  async function status(request: Request): Promise<Response> {
    // DMR's status strings, `<Type>[: <details>]`, which its CLI parses (`docker model status`).
    const state = await deps.engineVersion().then(
      (version) => `Running: ${ENGINE} ${version}`,
      (error: Error) => `Error: ${error.message}`,
    );
    // DMR's CLI reads the answer as strings only: the memory and the runners' builds come when asked for.
    const asked = new URL(request.url).searchParams;
    return Response.json({
      [ENGINE]: state,
      ...(asked.has("memory") ? { memory: await memoryStatus() } : {}),
      ...(asked.has("runners") ? { runners: scheduler.runners().map((r) => ({ model: r.model, mode: r.mode, state: r.state, ...engineFields(r) })) } : {}),
    });
  }

  async function memoryStatus() {
    const memory = await scheduler.memory().catch(() => undefined);
    if (!memory) return null;
    const { budget, usedBytes } = memory;
    return {
      where: budget.where,
      budget_bytes: budget.bytes,
      used_bytes: usedBytes,
      free_bytes: Math.max(0, budget.bytes - usedBytes),
      source: budget.source,
      reserve_bytes: budget.reserveBytes,
      devices: budget.devices.map((d) => ({ index: d.index, name: d.name, total_bytes: d.totalBytes, free_bytes: d.freeBytes })),
    };
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
    const changes = ModelSettings.safeParse(await settingsOf(body));
    if (!changes.success) throw badRequest("invalid_settings", z.prettifyError(changes.error));
    const changed: ModelSettings = dropUndefined(changes.data);
    // `engine: "default"` takes the model's own build away: it follows the default engine again.
    if (body.engine === FOLLOW_DEFAULT) changed.engine = undefined;
    // What the model's runners would launch with, against the build they would launch on.
    await deps.checkSettings?.({ ...(await deps.settings.get(model.id)), ...changed });
    const settings = await deps.settings.update(model.id, changed);
    // A new build alone moves the runners without a reload: the old ones serve until the new are ready.
    const onlyEngine = Object.keys(changed).length === 1 && "engine" in changed;
    if (onlyEngine && deps.moveToEngine) deps.moveToEngine(model);
    else scheduler.reload(model);
    scheduler.preload(model, body.mode ?? "completion");
    return Response.json({ model: model.tags[0] ?? model.id, settings: publicSettings(settings) }, { status: 202 });
  }

  /** The body's fields as our settings; a draft model is looked up in the store now. */
  async function settingsOf(body: ConfigureBody): Promise<Record<string, unknown>> {
    const contextSize = body["context-size"];
    return {
      contextSize: contextSize === -1 ? 0 : contextSize,
      slots: body.slots,
      threads: body.threads,
      keepAlive: body.keep_alive === undefined ? undefined : String(body.keep_alive),
      runtimeFlags: body["runtime-flags"]?.length ? body["runtime-flags"] : splitFlags(body["raw-runtime-flags"]),
      pooling: body.pooling,
      cacheRam: body["cache-ram"] === undefined ? undefined : Math.ceil(body["cache-ram"] / MIB) * MIB,
      reasoningBudget: body.llamacpp?.["reasoning-budget"],
      speculative: body.speculative && (await draft(body.speculative)),
      engine: body.engine === FOLLOW_DEFAULT ? undefined : body.engine,
    };
  }

  async function draft(speculative: NonNullable<ConfigureBody["speculative"]>) {
    const model = await store.resolve(speculative.draft_model);
    if (!model) throw modelNotFound(speculative.draft_model);
    // llama-server would look for the other files beside the first by name, which blobs lack.
    if (model.shardPaths) throw badRequest("unsupported_draft_model", `a draft model split in several files is not supported: ${speculative.draft_model}`);
    return dropUndefined({
      draftModel: model.tags[0] ?? model.id,
      draftPath: model.ggufPath,
      numTokens: speculative.num_tokens,
      minAcceptanceRate: speculative.min_acceptance_rate,
    });
  }

  /** DMR's `GET /engines/_configure[?model=]`: each configured model's settings, in its shape. */
  async function configured(request: Request): Promise<Response> {
    const only = new URL(request.url).searchParams.get("model");
    const wanted = only ? (await store.resolve(only))?.id : undefined;
    if (only && !wanted) throw modelNotFound(only);
    const entries = [];
    for (const [id, settings] of Object.entries(await deps.settings.all())) {
      if (wanted && id !== wanted) continue;
      const model = await store.resolve(id);
      if (!model) continue; // settings of a deleted model are kept but not shown
      const name = model.tags[0] ?? model.id;
      entries.push({ Backend: ENGINE, Model: name, ModelID: id, Mode: "completion", Config: publicSettings(settings) });
    }
    return Response.json(entries);
  }

  // /slots gives each slot's context and the tokens it holds: the KV-cache gauge is made of them.
  const runnerFigures = sharedFor(deps.runnerFiguresMs ?? RUNNER_FIGURES_MS, () => Promise.all([scheduler.scrape("/metrics"), scheduler.scrape("/slots")]));

  async function metrics(request: Request): Promise<Response> {
    const caller = deps.identify?.(request);
    const shows = caller && !caller.admin ? (key: string) => key === caller.name : undefined;
    const [scraped, slots] = await runnerFigures();
    const text = deps.metrics.render(scheduler.runners(), scraped, slots, shows);
    return new Response(text, { headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" } });
  }

  return [
    { method: "GET", path: "/engines/status", handle: status },
    { method: "GET", path: "/engines/ps", handle: () => Response.json(scheduler.runners().map(psEntry)) },
    { method: "GET", path: "/engines/df", handle: async () => Response.json(await deps.diskUsage()) },
    { method: "POST", path: "/engines/unload", handle: unload },
    { method: "POST", path: "/engines/_configure", handle: configure },
    { method: "GET", path: "/engines/_configure", handle: configured },
    { method: "GET", path: "/metrics", handle: metrics },
  ];
}

/** Settings in DMR's names (its `BackendConfiguration`), plus ours (`slots`, `pooling`). */
const publicSettings = (s: ModelSettings) =>
  dropUndefined({
    "context-size": s.contextSize,
    slots: s.slots,
    threads: s.threads,
    keep_alive: s.keepAlive,
    "runtime-flags": s.runtimeFlags,
    pooling: s.pooling,
    "cache-ram": s.cacheRam,
    engine: s.engine,
    llamacpp: s.reasoningBudget === undefined ? undefined : { "reasoning-budget": s.reasoningBudget },
    speculative: s.speculative && {
      draft_model: s.speculative.draftModel,
      num_tokens: s.speculative.numTokens,
      min_acceptance_rate: s.speculative.minAcceptanceRate,
    },
  });

/** A flags string split as a shell would: quotes group, nothing is expanded, operators are refused. */
function splitFlags(raw: string | undefined): string[] | undefined {
  if (raw === undefined || raw.trim() === "") return undefined;
  const words = parseShell(raw, (name) => `$${name}`);
  if (!words.every((w): w is string => typeof w === "string")) {
    throw badRequest("invalid_settings", "raw-runtime-flags may hold flags and values only, no shell operators");
  }
  return words;
}

function dropUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

import * as z from "zod";
import { readJson as readJsonUpTo } from "../http/body.ts";
import { badRequest, HttpError } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import type { ModelStore } from "../models/index.ts";
import type { Scheduler } from "../scheduler/scheduler.ts";
import type { SettingsStore } from "../scheduler/settings.ts";
import { BUILTIN, type Engines } from "./index.ts";
import { checkName, type EngineRecord } from "./store.ts";
import { officialImage, hasGpu } from "./layout.ts";
import { doneAnswer, pullAnswer } from "./pull-stream.ts";

// The engine builds over HTTP: list, pull, remove, choose the default, and what happened to them;
// with Docker Model Runner's install-backend / uninstall-backend shapes beside ours. Who may pull,
// choose and remove them (an admin): src/keys/access.ts.

export type EngineRouteDeps = {
  engines: Engines;
  scheduler: Scheduler;
  store: Pick<ModelStore, "resolve">;
  settings: SettingsStore;
};

const BODY_LIMIT = 16 * 1024;
const readJson = <T>(request: Request, schema: z.ZodType<T>) => readJsonUpTo(request, BODY_LIMIT, schema);

const PullBody = z.strictObject({ reference: z.string().trim().min(1).max(512) });
const UseBody = z.strictObject({ name: z.string().trim().min(1).max(300).nullable() });
// DMR's backend bodies; `version` (a llama.cpp release, `b6100`) or `reference` (an image) name the build.
const BackendBody = z.looseObject({
  backend: z.string().min(1),
  version: z.string().trim().min(1).max(300).optional(),
  reference: z.string().trim().min(1).max(512).optional(),
});

const ENGINE = "llama.cpp";

const shown = (r: EngineRecord, isDefault: boolean, runners: number) => ({
  name: r.name,
  reference: r.reference,
  digest: r.digest,
  version: r.version,
  variant: r.variant,
  layout: r.layout,
  size: r.size,
  pulled_at: r.pulledAt,
  default: isDefault,
  runners,
});

export function engineBuildRoutes(deps: EngineRouteDeps): Route[] {
  const { engines, scheduler } = deps;
  const moveRunners = runnerMover(deps);

  const runnersOn = (digest: string) => scheduler.runners().filter((r) => r.engine?.digest === digest).length;

  async function list(): Promise<Response> {
    const defaultName = await engines.defaultName();
    const chosen = defaultName === BUILTIN ? undefined : await engines.find(defaultName);
    const builtin = await engines.build(BUILTIN).then(
      (b) => ({ name: BUILTIN, version: b.version }),
      (error: Error) => ({ name: BUILTIN, error: error.message }),
    );
    const pulled = (await engines.store.list()).map((r) => shown(r, chosen?.digest === r.digest, runnersOn(r.digest)));
    const builtinRunners = scheduler.runners().filter((r) => !r.engine || r.engine.name === BUILTIN).length;
    return Response.json({ default: defaultName, builds: [{ ...builtin, default: defaultName === BUILTIN, runners: builtinRunners }, ...pulled] });
  }

  async function pull(request: Request): Promise<Response> {
    const { reference } = await readJson(request, PullBody);
    return pullAnswer(request, engines.pulling(checkName(reference), request.signal), async (record) => shown(record, false, 0), 201);
  }

  async function remove(name: string): Promise<Response> {
    const named = [await engines.defaultName(), ...Object.values(await deps.settings.all()).flatMap((s) => (s.engine ? [s.engine] : []))];
    const record = await engines.remove(checkName(name), (b) => scheduler.runners().some((r) => r.engine?.digest !== undefined && r.engine.digest === b.digest), named);
    return Response.json({ removed: record.name, digest: record.digest, reference: record.reference });
  }

  async function use(request: Request): Promise<Response> {
    const { name } = await readJson(request, UseBody);
    // In a model's settings `default` means "follow the default"; as the default itself it would name nothing.
    if (name === "default") throw badRequest("invalid_engine", 'the default engine is a pulled build\'s tag, reference or digest, or "builtin"; null goes back to the configured one (ENGINE_DEFAULT). "default" names a build only in a model\'s settings (it follows this one)');
    const chosen = await engines.use(name === null ? undefined : checkName(name));
    const moving = moveRunners(await withoutOwnEngine());
    return Response.json({ default: chosen.name, version: chosen.version, runners_moving: moving });
  }

  /** DMR's install-backend: a llama.cpp build by version or image, pulled and made the default. */
  async function installBackend(request: Request): Promise<Response> {
    const body = await readJson(request, BackendBody);
    refuseOtherBackends(body.backend);
    const wanted = body.reference ?? (body.version ? officialImage(body.version, await hasGpu()) : undefined);
    if (!wanted) return doneAnswer(request, { backend: ENGINE, installed: BUILTIN });
    return pullAnswer(
      request,
      engines.pulling(checkName(wanted), request.signal),
      async (record) => {
        const chosen = await engines.use(record.reference);
        return { backend: ENGINE, installed: chosen.name, version: chosen.version, digest: record.digest, runners_moving: moveRunners() };
      },
      200,
    );
  }

  async function uninstallBackend(request: Request): Promise<Response> {
    const body = await readJson(request, BackendBody);
    refuseOtherBackends(body.backend);
    const name = body.reference ?? body.version;
    if (name) return remove(name);
    // DMR's client names the backend alone: its downloaded build goes, the bundled one serves. Here
    // the default goes back to the built-in build; the pulled one stays until `engine rm` or a purge.
    const chosen = await engines.use(BUILTIN);
    return Response.json({ backend: ENGINE, default: chosen.name, version: chosen.version, runners_moving: moveRunners(await withoutOwnEngine()) });
  }

  /** Models that name their own engine keep it when the default changes. */
  async function withoutOwnEngine(): Promise<(modelId: string) => boolean> {
    const own = new Set(Object.entries(await deps.settings.all()).flatMap(([id, s]) => (s.engine ? [id] : [])));
    return (id) => !own.has(id);
  }

  return [
    { method: "GET", path: "/engines/builds", handle: list },
    { method: "POST", path: "/engines/builds", handle: pull },
    { method: "POST", path: "/engines/builds/default", handle: use },
    { method: "DELETE", path: "/engines/builds/:name+", handle: (request) => remove(nameParam(String(request.params.name))) },
    { method: "GET", path: "/engines/builds/events", handle: () => Response.json(engines.events.list()) },
    { method: "POST", path: "/engines/install-backend", handle: installBackend },
    { method: "POST", path: "/engines/uninstall-backend", handle: uninstallBackend },
  ];
}

/** A build's name in a path, as clients write it: percent-encoded (`llamadock engine rm` encodes a reference's `/` and `:`). */
function nameParam(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw badRequest("invalid_engine", `the engine's name is not a valid URL path segment: ${raw.slice(0, 200)}`);
  }
}

/** Docker Model Runner's other backends (vllm, diffusers...) are not here: 404, as DMR answers a backend it lacks. */
function refuseOtherBackends(backend: string): void {
  if (backend !== ENGINE) throw new HttpError(404, "not_found_error", "backend_not_found", `only the ${ENGINE} backend is served here, not ${JSON.stringify(backend.slice(0, 100))}`);
}

/**
 * Moves every loaded runner (of the models `only` keeps) whose build is no longer the one its
 * model's settings name, in the background: each move's outcome goes to the events. Returns how
 * many runners were looked at.
 */
export function runnerMover(deps: Pick<EngineRouteDeps, "engines" | "scheduler" | "store">): (only?: (modelId: string) => boolean) => number {
  const { engines, scheduler } = deps;
  return function moveRunners(only?: (modelId: string) => boolean): number {
    const runners = scheduler.runners().filter((r) => r.state === "ready" && (!only || only(r.modelId)));
    for (const runner of runners) void moveOne(runner.modelId, runner.mode, runner.model);
    return runners.length;
  };

  async function moveOne(modelId: string, mode: Parameters<Scheduler["upgrade"]>[1], name: string): Promise<void> {
    const model = await deps.store.resolve(modelId);
    if (!model) return;
    const outcome = await scheduler.upgrade(model, mode).catch((error: Error) => ({ kind: "failed" as const, why: error.message, to: undefined, from: undefined }));
    const engine = outcome.to ?? "?";
    if (outcome.kind === "upgraded") engines.events.add({ kind: "upgraded", engine, model: name, message: `${mode} runner moved from ${outcome.from} to ${outcome.to}; the old one finishes its requests, then stops` });
    if (outcome.kind === "when-idle") engines.events.add({ kind: "retire_when_idle", engine, model: name, message: `no room for a second ${mode} runner: the one on ${outcome.from} retires when idle, the next load uses ${outcome.to}` });
    if (outcome.kind === "failed") engines.events.add({ kind: "upgrade_failed", engine, model: name, message: `the ${mode} runner stays on ${outcome.from ?? "its build"}: ${engine} failed to load: ${outcome.why}` });
  }
}

import type { Config } from "./config.ts";
import { createModelApi, createModelStore } from "./models/index.ts";
import { logRoutes } from "./inference/logs.ts";
import { webRoutes } from "./web/routes.ts";
import { routeTable, type Route } from "./http/router.ts";
import { requestErrorReporter } from "./http/request-errors.ts";
import { callerScope, cameTrusted } from "./http/guard.ts";
import { createKeyring } from "./keys/keyring.ts";
import { withAccess } from "./keys/access.ts";
import { openBatches } from "./batches/index.ts";
import { anthropicRoutes } from "./dialects/anthropic/routes.ts";
import { createResponseStore, responsesRoutes } from "./dialects/responses.ts";
import { rerankRoutes } from "./dialects/rerank.ts";
import { decisionRoutes } from "./decisions/routes.ts";
import { ollamaRefusal, ollamaRoutes } from "./dialects/ollama/routes.ts";
import { createInference } from "./inference/index.ts";
import { createDrain } from "./pod/drain.ts";
import { HEALTH_PATHS, healthRoutes } from "./pod/health.ts";
import { createPinned, pullThrough } from "./pod/pinned.ts";
import type { ListenTarget, Runtime } from "./runtime/types.ts";
import type { Service } from "./service.ts";
import { VERSION } from "./version.ts";

// The model runner's wiring: its store, scheduler, routes and guard policy. Loaded only when the
// runner is served, so that an album-only process does not carry its code and heap.

/** The engines' events the live state carries: the last few (all of them: GET /engines/builds/events). */
const ENGINE_EVENTS_SHOWN = 20;

/** Over the Unix socket, Docker Model Runner's paths carry this prefix; we accept it on TCP too. */
export const UNIX_SOCKET_PREFIX = "/exp/vDD4.40";

/** What Docker Model Runner's clients ask to see that a runner is there, and which. */
const runningText = () => new Response("Docker Model Runner is running", { headers: { "content-type": "text/plain; charset=utf-8" } });
const aboutRoutes: Route[] = [
  // `/`: the web routes' (the page for browsers, runningText for everyone else).
  { method: "GET", path: "/version", handle: () => Response.json({ version: VERSION }) },
];

/**
 * What /api/version answers: the Ollama API release whose routes and shapes we serve (clients such
 * as Open WebUI check it before using newer fields), not our own version (that is at /version).
 */
const OLLAMA_API_VERSION = "0.12.0";


export function modelRunner(config: Config, runtime: Runtime): Service {
  const store = createModelStore(config.models.path, { defaultRegistry: config.models.defaultRegistry }, { lockStaleMs: config.models.lockStaleMs });
  const pinned = createPinned({
    references: config.pod.pinnedModels,
    allowUnpinned: config.pod.allowUnpinned,
    store,
    pull: (reference) => pull(reference),
    log: (line) => console.log(line),
  });
  const drain = createDrain();
  // Whom each request speaks for, by its key's name (see src/keys/keyring.ts).
  const keyring = createKeyring(config.security.keyEntries, config.security.keyDefaults, cameTrusted);
  const registry = { fetch: globalThis.fetch.bind(globalThis), insecureHosts: config.models.insecureRegistries, credentials: config.models.registryCredentials, stallTimeoutMs: config.models.pullStallTimeoutMs };
  const inference = createInference(config.inference, runtime, store, { admits: pinned.admits, identify: keyring.identify }, { ...registry, defaultRegistry: config.models.defaultRegistry });
  const batches = openBatches(config.inference.batches, config.files, inference.deps, keyring.identify);
  // A request's work that fails with an error of ours is logged with the request and counted.
  const report = requestErrorReporter(() => inference.deps.metrics.countRequestError());
  const fetch = globalThis.fetch.bind(globalThis);
  // Followed logs and events streams never end by themselves: they end when the server stops.
  const streamsEnd = new AbortController();
  const models = createModelApi({
    store,
    registry,
    hub: {
      fetch,
      endpoint: config.models.hfEndpoint,
      stallTimeoutMs: config.models.pullStallTimeoutMs,
      ...(config.models.hfToken ? { token: config.models.hfToken } : {}),
    },
    // The runners stopping for a delete save their caches like any other stop: a deleted model's go after it.
    whileDeleting: async (model, remove) => {
      const result = await inference.scheduler.whileDeleting(model, remove);
      await inference.slotCache?.forget(model.ggufPath);
      return result;
    },
    // A purge of everything takes the engine builds nothing runs or names; any purge, engine pulls left unfinished.
    alsoPurge: async (all) => {
      const named = [await inference.engines.defaultName(), ...Object.values(await inference.settings.all()).flatMap((s) => (s.engine ? [s.engine] : []))];
      const running = new Set(inference.scheduler.runners().flatMap((r) => (r.engine?.digest ? [r.engine.digest] : [])));
      return inference.engines.purge(all, (digest) => running.has(digest), named);
    },
    maxConcurrentPulls: config.models.pullMaxConcurrent,
    pullParts: config.models.pullParts,
  });
  // Who may call each route: one table (src/keys/access.ts), applied here to all of them.
  const routes: Route[] = withAccess([
    ...models.routes,
    // Before the engine routes, whose catch-all for other engines would take /engines/llama.cpp/v1/messages.
    ...anthropicRoutes(inference.deps),
    ...responsesRoutes(inference.deps, createResponseStore(config.inference.responsesStore), callerScope(config.security.apiKeys)),
    ...rerankRoutes(inference.deps),
    ...decisionRoutes(inference.deps),
    ...batches.routes,
    ...ollamaRoutes({ inference: inference.deps, store, models, version: OLLAMA_API_VERSION }),
    ...inference.routes,
    ...logRoutes({ store, logDir: config.inference.logDir, ending: streamsEnd.signal }),
    // `/` is the page for browsers, and DMR's text for everyone else.
    ...webRoutes({
      runners: () => inference.scheduler.runners(),
      models: () => store.list(),
      pulls: () => models.pulls(),
      loads: () => inference.loads.view(),
      engineEvents: () => inference.engines.events.list().slice(-ENGINE_EVENTS_SHOWN),
      runDir: config.inference.runtimeDir,
      slotTables: () => inference.scheduler.slotTables(),
      usage: (filter) => inference.usage.rows(filter),
      identify: keyring.identify,
      notBrowser: runningText,
      ending: streamsEnd.signal,
      report,
    }),
    ...aboutRoutes,
    ...healthRoutes({
      draining: () => drain.draining,
      storeProblem: () => store.list().then(() => undefined, (error: Error) => `the model store cannot be read (${error.message})`),
      pinnedProblem: pinned.problem,
    }),
  ], keyring.identify, ollamaRefusal);
  const targets: ListenTarget[] = [{ kind: "tcp", hostname: config.runner.host, port: config.runner.port }];
  if (config.runner.socketPath) targets.push({ kind: "unix", path: config.runner.socketPath });
  const routed = routeTable(routes, { prefixes: ["", UNIX_SOCKET_PREFIX], report });
  const pull = pullThrough(routed);
  pinned.start(inference.scheduler);
  // Blobs a deleted model left to a process that has stopped since (it served them then).
  void store.collectOrphans().catch((error: Error) => console.error(`model store: leftover blobs not removed: ${error.message}`));
  const idle = () => inference.scheduler.runners().every((r) => r.inUse === 0 && r.waiting === 0);
  return {
    name: "model runner",
    // While draining, probes and metrics still answer.
    handler: drain.wrap(routed, [...HEALTH_PATHS, "/metrics"]),
    targets,
    policy: config.security,
    drain: async (graceMs) => {
      streamsEnd.abort();
      // The runners' caches are saved as they stop, within what is left of the grace.
      inference.slotCache?.shutdownBy(Date.now() + graceMs);
      // Batch lines running end first (none is cut short, to be run again); no other starts.
      await batches.stop(graceMs);
      return drain.drain(graceMs, idle);
    },
    stop: async () => {
      pinned.stop();
      await batches.stop(0);
      await inference.stop();
      await store.close();
    },
  };
}

import { systemClock } from "./album/deadline.ts";
import { createAlbumHandler } from "./album/handler.ts";
import type { Config } from "./config.ts";
import { createModelStore, createPuller, modelRoutes } from "./models/index.ts";
import { logRoutes } from "./inference/logs.ts";
import { webRoutes } from "./web/routes.ts";
import { routeTable, type Route } from "./http/router.ts";
import { anthropicRoutes } from "./dialects/anthropic.ts";
import { createResponseStore, responsesRoutes } from "./dialects/responses.ts";
import { createInference } from "./inference/index.ts";
import type { GuardPolicy } from "./http/guard.ts";
import type { FetchHandler, ListenTarget, Runtime } from "./runtime/types.ts";
import { VERSION } from "./version.ts";

// The single place where dependencies are wired: config and runtime in, services out.
// No runtime imports here; `index.ts` chooses the runtime.

export type Service = {
  name: string;
  /** The routes, before the guard (in-process tests call it). */
  handler: FetchHandler;
  targets: ListenTarget[];
  /** Who may call, checked on each listener before any route (see src/http/guard.ts). */
  policy: GuardPolicy;
  /** Ends what the service started (the model runner's llama-server runners), after its listeners closed. */
  stop?: () => Promise<void>;
};

export function buildServices(config: Config, runtime: Runtime): Service[] {
  const services: Service[] = [];
  if (config.services.includes("album")) {
    services.push({
      name: "album",
      handler: createAlbumHandler({
        fetch: runtime.upstreamFetch,
        baseUrl: config.album.photosBaseUrl,
        timeoutMs: config.album.photosTimeoutMs,
        clock: systemClock,
      }),
      // Host and Origin checks as for the model runner; its contract has no API key.
      policy: { ...config.security, apiKeys: [] },
      targets: [
        { kind: "tcp", hostname: config.album.host, port: config.album.port },
        ...(config.album.socketPath ? [{ kind: "unix" as const, path: config.album.socketPath }] : []),
      ],
    });
  }
  if (config.services.includes("runner")) services.push(modelRunner(config, runtime));
  return services;
}

/** What Docker Model Runner's clients ask to see that a runner is there, and which. */
const runningText = () => new Response("Docker Model Runner is running", { headers: { "content-type": "text/plain; charset=utf-8" } });
const aboutRoutes: Route[] = [
  { method: "GET", path: "/", handle: runningText },
  { method: "GET", path: "/version", handle: () => Response.json({ version: VERSION }) },
];

/** Over the Unix socket, Docker Model Runner's paths carry this prefix; we accept it on TCP too. */
export const UNIX_SOCKET_PREFIX = "/exp/vDD4.40";

function modelRunner(config: Config, runtime: Runtime): Service {
  const store = createModelStore(config.models.path, { defaultRegistry: config.models.defaultRegistry });
  const inference = createInference(config.inference, runtime, store);
  const fetch = globalThis.fetch.bind(globalThis);
  // Shared with the status page, which shows the pulls in progress.
  const puller = createPuller(store, { maxConcurrent: config.models.pullMaxConcurrent });
  const routes: Route[] = [
    ...modelRoutes({
      store,
      registry: {
        fetch,
        insecureHosts: config.models.insecureRegistries,
        credentials: config.models.registryCredentials,
        stallTimeoutMs: config.models.pullStallTimeoutMs,
      },
      hub: {
        fetch,
        endpoint: config.models.hfEndpoint,
        stallTimeoutMs: config.models.pullStallTimeoutMs,
        ...(config.models.hfToken ? { token: config.models.hfToken } : {}),
      },
      whileDeleting: (model, remove) => inference.scheduler.whileDeleting(model, remove),
      maxConcurrentPulls: config.models.pullMaxConcurrent,
      puller,
    }),
    // Before the engine routes, whose catch-all for other engines would take /engines/llama.cpp/v1/messages.
    ...anthropicRoutes(inference.deps),
    ...responsesRoutes(inference.deps, createResponseStore(config.inference.responsesStore)),
    ...inference.routes,
    ...logRoutes({ store, logDir: config.inference.logDir }),
    // Before aboutRoutes: `/` is the page for browsers, and DMR's text for everyone else.
    ...webRoutes({
      runners: () => inference.scheduler.runners(),
      models: () => store.list(),
      pulls: () => puller.active(),
      runDir: config.inference.runtimeDir,
      notBrowser: runningText,
    }),
    ...aboutRoutes,
  ];
  const targets: ListenTarget[] = [{ kind: "tcp", hostname: config.runner.host, port: config.runner.port }];
  if (config.runner.socketPath) targets.push({ kind: "unix", path: config.runner.socketPath });
  const handler = routeTable(routes, { prefixes: ["", UNIX_SOCKET_PREFIX] });
  return { name: "model runner", handler, targets, policy: config.security, stop: inference.stop };
}

import { env } from "node:process";
import { createSupervisor, resolveLlamaServerBinary, type LlamaServerBinary, type Supervisor } from "../../sidecar/index.ts";
import type { Config } from "../config.ts";
import type { Route } from "../http/router.ts";
import type { ModelStore } from "../models/index.ts";
import type { Runtime } from "../runtime/types.ts";
import { createScheduler, type Scheduler } from "../scheduler/scheduler.ts";
import { cpuBudget } from "../scheduler/cpu.ts";
import { createSettingsStore, type SettingsStore } from "../scheduler/settings.ts";
import type { StartRunner } from "../scheduler/types.ts";
import { engineRoutes } from "./engines.ts";
import { createMetrics } from "./metrics.ts";
import { inferenceRoutes, type InferenceDeps } from "./routes.ts";

// Inference wired together: llama-server found once (lazily, retried after a failure), runners
// started by the sidecar's supervisor, scheduled by the scheduler, served by the engine routes.

/** `deps` serve the dialects' routes, which forward through the same checks, scheduler and metrics. */
export type Inference = { routes: Route[]; deps: InferenceDeps; scheduler: Scheduler; settings: SettingsStore; stop(): Promise<void> };

export function createInference(
  config: Config["inference"],
  runtime: Runtime,
  store: ModelStore,
  { admits }: Pick<InferenceDeps, "admits"> = {},
): Inference {
  const launcher = lazyLauncher(config, runtime);
  const metrics = createMetrics();
  const settings = createSettingsStore(config.settingsPath);
  const scheduler = createScheduler({
    start: launcher.start,
    settings,
    limits: {
      maxRunners: config.maxRunners,
      slots: config.slots,
      queueDepth: config.queueDepth,
      runnerQueue: config.runnerQueue,
      keepAlive: config.keepAlive,
      cpuCores: cpuBudget(),
      ...(config.threads ? { threads: config.threads } : {}),
    },
    observe: metrics.observer,
  });
  // Finds the binary and ends runners a previous run left behind, before the first request needs it.
  void launcher.ready().catch((error: Error) => console.error(`llama-server is not usable yet: ${error.message}`));
  const deps: InferenceDeps = {
    store,
    scheduler,
    metrics,
    bodyLimit: config.bodyLimit,
    bodyPolicy: { allowRemoteMedia: config.allowRemoteMedia },
    ...(admits ? { admits } : {}),
  };
  const routes = [
    ...inferenceRoutes(deps),
    ...engineRoutes({ store, scheduler, settings, metrics, engineVersion: async () => (await launcher.binary()).version }),
  ];
  return { routes, deps, scheduler, settings, stop: () => scheduler.stopAll() };
}

function lazyLauncher(config: Config["inference"], runtime: Runtime) {
  let binary: Promise<LlamaServerBinary> | undefined;
  let supervisor: Promise<Supervisor> | undefined;
  const retryable = <T>(promise: Promise<T>, forget: () => void) =>
    promise.catch((error: unknown) => {
      forget();
      throw error;
    });
  const getBinary = () => (binary ??= retryable(resolveLlamaServerBinary({ runtime, env }), () => (binary = undefined)));
  const ready = () =>
    (supervisor ??= retryable(
      (async () => {
        const found = await getBinary();
        console.log(`llama-server ${found.version} from ${found.path} (${found.source})`);
        const { runtimeDir: runDir, logDir, readyTimeoutMs } = config;
        const created = createSupervisor({ runtime, binary: found, runDir, logDir, readyTimeoutMs });
        await created.cleanupLeftovers();
        return created;
      })(),
      () => (supervisor = undefined),
    ));
  const start: StartRunner = async (spec, signal) => (await ready()).start(spec, signal);
  return { binary: getBinary, ready, start };
}

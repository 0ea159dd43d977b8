import { env } from "node:process";
import { createSupervisor, offloadDevices, resolveLlamaServerBinary, type LlamaServerBinary, type Supervisor } from "../../sidecar/index.ts";
import type { Config } from "../config.ts";
import type { Route } from "../http/router.ts";
import type { ModelStore } from "../models/index.ts";
import type { Runtime } from "../runtime/types.ts";
import { createScheduler, type Scheduler } from "../scheduler/scheduler.ts";
import { cpuBudget } from "../scheduler/cpu.ts";
import { createSettingsStore, type SettingsStore } from "../scheduler/settings.ts";
import { detectBudget } from "../scheduler/memory/detect.ts";
import type { MemoryLimits } from "../scheduler/memory/sizing.ts";
import { formatSize } from "../models/gguf.ts";
import { diskUsage } from "./disk.ts";
import type { StartRunner } from "../scheduler/types.ts";
import { engineRoutes } from "./engines.ts";
import { fitRoutes } from "./fit.ts";
import { createMetrics } from "./metrics.ts";
import { inferenceRoutes, type InferenceDeps } from "./routes.ts";
import { createMediaInliner } from "./media/fetch.ts";
import { openLedger, type Ledger } from "./usage/ledger.ts";
import { createMeter } from "./usage/meter.ts";
import { usageFamilies } from "./usage/metrics.ts";
import { usageRoutes } from "./usage/routes.ts";
import { createLimiter } from "../keys/limits.ts";
import { LOCAL_CALLER } from "../keys/keyring.ts";
import { createSlotCache, type SlotCache } from "../slot-cache/index.ts";
import { withPromptsPerKey } from "../slot-cache/per-key.ts";
import { createLoads, LOAD_HISTOGRAM, LOAD_HISTOGRAM_HELP, type Loads } from "./loads.ts";
import { createEngines, settingsRefusal, type Engines } from "../engines/index.ts";
import { engineBuildRoutes, runnerMover } from "../engines/routes.ts";
import type { RegistryOptions } from "../models/registry/client.ts";
import { badRequest } from "../http/errors.ts";

// Inference wired together: llama-server found once (lazily, retried after a failure), runners
// started by the sidecar's supervisor, scheduled by the scheduler, served by the engine routes.

/** What the remote media of one request may take together: llama-server's own bound on one fetch. */
const REMOTE_MEDIA_LIMITS = { maxBytes: 10 * 1024 * 1024, timeoutMs: 10_000 };

/** `deps` serve the dialects' routes, which forward through the same checks, scheduler and metrics. */
/** `usage`: the usage ledger's rows (the status page's sessions view shows the day's). */
export type Inference = { routes: Route[]; deps: InferenceDeps; scheduler: Scheduler; settings: SettingsStore; slotCache?: SlotCache; loads: Loads; engines: Engines; usage: Pick<Ledger, "rows">; stop(): Promise<void> };

export function createInference(
  config: Config["inference"],
  runtime: Runtime,
  store: ModelStore,
  { admits, identify }: Pick<InferenceDeps, "admits" | "identify"> = {},
  registry: RegistryOptions & { defaultRegistry?: string } = { fetch: globalThis.fetch.bind(globalThis), insecureHosts: [], credentials: {} },
): Inference {
  const launcher = lazyLauncher(config, runtime);
  const { defaultRegistry, ...registryOptions } = registry;
  const engines = createEngines({ config: config.engines, registry: registryOptions, runtime, builtin: launcher.binary, ...(defaultRegistry ? { defaultRegistry } : {}) });
  // Usage per key and model, kept across restarts; each key's limits.
  const ledger = openLedger(config.usagePath, config.usageBounds);
  const limiter = createLimiter();
  const loads = createLoads();
  const metrics = createMetrics((shows) => [...usageFamilies(ledger, limiter, shows), { name: LOAD_HISTOGRAM, type: "histogram", help: LOAD_HISTOGRAM_HELP, lines: loads.histogramLines() }]);
  const settings = createSettingsStore(config.settingsPath);
  const slotCache = createSlotCache({ ...config.slotCache, perKey: config.promptsPerKey });
  const serving = servingFiles(store, launcher.start);
  const perKey = (start: StartRunner) => (config.promptsPerKey ? withPromptsPerKey(start) : start);
  const scheduler = createScheduler({
    // The slot cache's key names the build a runner runs: a cache saved by another is never loaded.
    // A pulled build by its version and digest; the builtin one by its version, as before builds could be chosen.
    start: loads.track(perKey(slotCache ? slotCache.wrap(serving, async (spec) => (spec?.engine?.digest ? `${spec.engine.version} ${spec.engine.digest}` : (await launcher.binary()).version), loads) : serving)),
    engineFor: (_model, modelSettings) => engines.forModel(modelSettings),
    // A failed move tried again goes through the mover, so that its outcome is told as the first try's.
    retryMove: (model) => moveRunners((id) => id === model.id),
    settings,
    limits: {
      maxRunners: config.maxRunners,
      slots: config.slots,
      promptCache: config.promptCache,
      queueDepth: config.queueDepth,
      runnerQueue: config.runnerQueue,
      keepAlive: config.keepAlive,
      batchEvictAfterMs: config.batchEvictAfterMs,
      engineMoveRetryMs: config.engineMoveRetryMs,
      cpuCores: cpuBudget(),
      ...(config.threads ? { threads: config.threads } : {}),
      watch: config.watch,
    },
    observe: { ...metrics.observer, waitingForRoom: loads.waitingForRoom },
    memory: memoryLimits(config.memory, runtime, launcher.binary),
    // Runner names (their logs') go on from the previous run's, never repeat them: see firstSerial.
    firstSerial: Date.now(),
  });
  // Finds the binary and ends runners a previous run left behind, before the first request needs it.
  const readied = launcher.ready().catch((error: Error) => console.error(`llama-server is not usable yet: ${error.message}`));
  const deps: InferenceDeps = {
    store,
    scheduler,
    metrics,
    bodyLimit: config.bodyLimit,
    bodyPolicy: { allowRemoteMedia: config.allowRemoteMedia },
    bounds: config.bounds,
    ...(config.allowRemoteMedia ? { inlineMedia: createMediaInliner(REMOTE_MEDIA_LIMITS) } : {}),
    ...(admits ? { admits } : {}),
    ...(identify ? { identify } : {}),
    meter: createMeter(ledger, limiter),
    limiter,
    promptsPerKey: config.promptsPerKey,
    sessionAffinity: config.sessionAffinity,
  };
  const moveRunners = runnerMover({ engines, scheduler, store });
  const routes = [
    ...inferenceRoutes(deps),
    ...usageRoutes(ledger, identify ?? (() => LOCAL_CALLER)),
    ...engineRoutes({
      store,
      ...(identify ? { identify } : {}),
      scheduler,
      settings,
      metrics,
      runnerFiguresMs: config.metricsCacheMs,
      // The default build's; the builtin one not found: why, as before.
      engineVersion: async () => {
        const build = (await engines.forModel({})) ?? (await launcher.binary());
        return "name" in build && build.name !== "builtin" ? `${build.version} (engine ${build.name})` : build.version;
      },
      checkSettings: async (modelSettings) => {
        const build = await engines.forModel(modelSettings);
        const why = build && settingsRefusal(build, modelSettings);
        if (why) throw badRequest("unsupported_by_engine", why);
      },
      moveToEngine: (model) => moveRunners((id) => id === model.id),
      diskUsage: () => diskUsage(store, launcher.binary, engines.store),
    }),
    ...engineBuildRoutes({ engines, scheduler, store, settings }),
    ...fitRoutes({ store, scheduler }),
  ];
  const stop = async () => {
    // What start began writes in the runtime folder: a stop right after start waits for it.
    await readied;
    await scheduler.stopAll();
    await ledger.flush();
  };
  return { routes, deps, scheduler, settings, ...(slotCache ? { slotCache } : {}), loads, engines, usage: ledger, stop };
}

/**
 * Runners started with their files marked as served in the store, for as long as each runs: no
 * other process on the store removes them meanwhile (a delete there leaves them to us), and
 * once the runner ends, a file whose model was deleted meanwhile is removed.
 */
function servingFiles(store: Pick<ModelStore, "serve">, start: StartRunner): StartRunner {
  return async (spec, signal) => {
    // Every store blob the command line names: the weights (every shard), a projector, a draft model.
    const release = await store.serve([spec.modelPath, ...(spec.modelShards ?? []), ...(spec.mmprojPath ? [spec.mmprojPath] : []), ...(spec.extraArgs ?? [])]);
    try {
      const runner = await start(spec, signal);
      void runner.exited.then(release);
      return {
        fetch: runner.fetch,
        exited: runner.exited,
        running: () => runner.running(),
        stop: () => runner.stop().finally(release),
        kill: () => runner.kill().finally(release),
      };
    } catch (error) {
      release();
      throw error;
    }
  };
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
        const { runtimeDir: runDir, logDir, logsKept, readyTimeoutMs } = config;
        const created = createSupervisor({ runtime, binary: found, runDir, logDir, logsKept, readyTimeoutMs });
        await created.cleanupLeftovers();
        return created;
      })(),
      () => (supervisor = undefined),
    ));
  const start: StartRunner = async (spec, signal) => (await ready()).start(spec, signal);
  return { binary: getBinary, ready, start };
}

/**
 * The budget, read once when first needed: GPUs count only when llama-server can offload to them
 * (a CPU-only build on a GPU host runs in system memory). Read again while no binary is found (no
 * runner starts then anyway) and after a failed read.
 */
function memoryLimits(settings: Config["inference"]["memory"], runtime: Runtime, binary: () => Promise<LlamaServerBinary>) {
  let limits: Promise<MemoryLimits> | undefined;
  const read = async (): Promise<MemoryLimits> => {
    const found = settings.gpu === "off" ? undefined : await binary().catch(() => undefined);
    if (settings.gpu !== "off" && !found) limits = undefined;
    const offloads = found !== undefined && (await offloadDevices(runtime, found, env)).length > 0;
    const budget = await detectBudget(runtime, env, { reserve: settings.reserve, gpu: offloads, ...(settings.budget !== undefined ? { setting: settings.budget } : {}) });
    if (limits) {
      const devices = budget.devices.map((d) => `${d.name} (${formatSize(d.freeBytes)} free)`).join(", ");
      console.log(`memory budget: ${formatSize(budget.bytes)} of ${budget.where === "gpu" ? `GPU memory: ${devices}` : "system memory"} (${budget.source})`);
    }
    return { budget, minContext: settings.minContext };
  };
  return () => {
    if (limits) return limits;
    const reading = read().catch((error: unknown) => {
      limits = undefined;
      throw error;
    });
    limits = reading;
    return reading;
  };
}

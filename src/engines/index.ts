import { env } from "node:process";
import { buildLlamaServerArgs, describeBuild, runnerSpec, spellFor, type EngineBuild, type LlamaServerBinary } from "../../sidecar/index.ts";
import { badRequest } from "../http/errors.ts";
import { conflict } from "../models/errors.ts";
import type { RegistryOptions } from "../models/registry/client.ts";
import { parseReference } from "../models/reference.ts";
import type { Runtime } from "../runtime/types.ts";
import type { ModelSettings } from "../scheduler/settings.ts";
import { createEventLog, type EngineEvents } from "./events.ts";
import { hasGpu, officialImage } from "./layout.ts";
import { pullEngine } from "./pull.ts";
import { watchedPull, type EnginePull } from "./pull-stream.ts";
import { BUILTIN, engineNotFound, openEngineStore, type EngineRecord } from "./store.ts";

// The llama.cpp builds runners run on: the builtin one (LLAMA_SERVER_PATH, PATH, the setup's
// build), and those pulled into the engine store. Which one a model's runners launch on: its
// `engine` setting, else the default (`engine use`, else ENGINE_DEFAULT / LLAMA_SERVER_VERSION,
// else builtin). A change of either moves the loaded runners over without dropping a request
// (the scheduler's `upgrade`); what happened is kept in the events (GET /engines/events).

export type EnginesConfig = { path: string; default?: string | undefined };

export type EnginesDeps = {
  config: EnginesConfig;
  registry: RegistryOptions;
  runtime: Runtime;
  defaultRegistry?: string;
  /** The builtin llama-server, as the server finds it. */
  builtin: () => Promise<LlamaServerBinary>;
};

export type Engines = ReturnType<typeof createEngines>;

export function createEngines(deps: EnginesDeps) {
  const store = openEngineStore(deps.config.path);
  const events: EngineEvents = createEventLog();
  const pullDeps = { store, registry: deps.registry, runtime: deps.runtime, gpu: hasGpu, ...(deps.defaultRegistry ? { defaultRegistry: deps.defaultRegistry } : {}) };
  /** Pulls in progress by what was asked: two asks for one image share its pull, and its progress. */
  const pulls = new Map<string, EnginePull>();
  /** The builtin build's `--help`, read once per binary. */
  let builtinFlags: { path: string; flags: Promise<string[] | undefined> } | undefined;

  /** The pull of `reference`, or the one running already (whose first caller's `signal` cancels it). */
  function pulling(reference: string, signal = new AbortController().signal): EnginePull {
    const running = pulls.get(reference);
    if (running) return running;
    const job = watchedPull((watch) =>
      pullEngine(reference, pullDeps, signal, watch).then(
        // Told once per build stored: a pull that found its build there already (asked again, under
        // another name, or by a caller that came just after the one that stored it) stored nothing.
        ({ record, stored }) => {
          if (stored) events.add({ kind: "pulled", engine: record.name, message: `pulled ${record.reference} (${record.version}, ${record.variant}, ${record.digest})` });
          return record;
        },
        (error: Error) => {
          events.add({ kind: "pull_failed", engine: reference, message: error.message });
          throw error;
        },
      ),
    );
    pulls.set(reference, job);
    void job.record.finally(() => pulls.delete(reference)).catch(() => {});
    return job;
  }

  const pull = (reference: string, signal?: AbortSignal): Promise<EngineRecord> => pulling(reference, signal).record;

  async function builtin(): Promise<EngineBuild> {
    const binary = await deps.builtin();
    if (builtinFlags?.path !== binary.path) builtinFlags = { path: binary.path, flags: describeBuild(deps.runtime, binary.path, env).then((d) => d.flags, () => undefined) };
    const flags = await builtinFlags.flags;
    return { name: BUILTIN, path: binary.path, version: binary.version, ...(flags ? { flags } : {}) };
  }

  /** A reference as a pull stores it (its key); undefined for one that is not (its pull says why). */
  function storedAs(reference: string): string | undefined {
    try {
      return parseReference(reference, pullDeps.defaultRegistry ? { defaultRegistry: pullDeps.defaultRegistry } : {}).key;
    } catch {
      return undefined;
    }
  }

  /**
   * The pulled build a name names: as written (a tag, a digest, the reference stored), or as a pull
   * of it would have stored it (a reference in the default registry is stored without it, with
   * `:latest` when it has no tag). So whatever `pull` took, `use`, `rm`, a model's `engine` and
   * ENGINE_DEFAULT take too.
   */
  async function find(name: string): Promise<EngineRecord | undefined> {
    const found = await store.find(name);
    if (found) return found;
    const key = storedAs(name);
    return key === undefined || key === name ? undefined : store.find(key);
  }

  /**
   * The build a name names. The configured default that is not in the store yet is pulled (DMR's
   * LLAMA_SERVER_VERSION: `b6100` names llama.cpp's image of that version); any other name must
   * have been pulled. Once pulled, the default is found by the reference its pull stored: else
   * each launch and status line asked the registry again, and failed where it could not be reached.
   */
  async function build(name: string): Promise<EngineBuild> {
    if (name === BUILTIN) return builtin();
    const record = await find(name);
    if (record) return store.build(record);
    if (name !== deps.config.default) throw engineNotFound(name);
    const reference = /^b\d+$/.test(name) ? officialImage(name, await hasGpu()) : name;
    return store.build((await find(reference)) ?? (await pull(reference)));
  }

  const defaultName = async () => (await store.defaultName()) ?? deps.config.default ?? BUILTIN;

  return {
    store,
    events,
    find,
    pull,
    pulling,
    build,
    defaultName,
    /**
     * The build a model's runners launch on now. The builtin one not found: undefined, so the
     * supervisor says why, as it did before engines could be chosen.
     */
    async forModel(settings: Pick<ModelSettings, "engine">): Promise<EngineBuild | undefined> {
      const name = settings.engine ?? (await defaultName());
      return name === BUILTIN ? builtin().catch(() => undefined) : build(name);
    },
    /** Makes `name` the default (undefined: back to the configured one); the caller moves the runners. */
    async use(name: string | undefined): Promise<EngineBuild> {
      const chosen = await build(name ?? deps.config.default ?? BUILTIN);
      await store.setDefault(name);
      events.add({ kind: "default", engine: chosen.name, message: `runners launch on ${chosen.name} (${chosen.version}) unless a model names another` });
      return chosen;
    },
    /**
     * A purge's share: pulls that never finished always; with `all`, every build no runner runs
     * and nothing names (`named`: the default and the models' engines).
     */
    async purge(all: boolean, running: (digest: string) => boolean, named: string[]): Promise<{ removed: string[]; files: number; bytes: number }> {
      const leftovers = await store.removeLeftovers();
      const removed: string[] = [];
      let bytes = leftovers.bytes;
      if (all) {
        const kept = new Set((await Promise.all(named.map(find))).flatMap((r) => (r ? [r.digest] : [])));
        for (const record of await store.list()) {
          if (kept.has(record.digest) || running(record.digest)) continue;
          bytes += await store.remove(record);
          removed.push(record.name);
          events.add({ kind: "removed", engine: record.name, message: `purged ${record.reference} (${record.digest})` });
        }
      }
      return { removed, files: leftovers.files + removed.length, bytes };
    },
    /** Removes a pulled build no runner runs and nothing names. */
    async remove(name: string, inUse: (build: EngineBuild) => boolean, namedBy: string[]): Promise<EngineRecord> {
      const record = await find(name);
      if (!record) throw name === BUILTIN ? badRequest("invalid_engine", "the builtin llama-server is not in the engine store") : engineNotFound(name);
      const chosen = store.build(record);
      if (inUse(chosen)) throw conflict(`engine ${record.name} runs loaded models: unload them or move them to another engine first`);
      for (const named of namedBy) {
        const other = named === BUILTIN ? undefined : await find(named);
        if (other?.digest === record.digest) throw conflict(`engine ${record.name} is the default or a model's engine (${named}): choose another first`);
      }
      await store.remove(record);
      events.add({ kind: "removed", engine: record.name, message: `removed ${record.reference} (${record.digest})` });
      return record;
    },
  };
}

/**
 * Why a model's settings cannot run on `build`: a flag they set that the build has under no name
 * (llama.cpp renamed or dropped it). Checked at `_configure`, so it never fails at load instead.
 */
export function settingsRefusal(build: EngineBuild, settings: ModelSettings): string | undefined {
  if (!build.flags) return undefined;
  const launch = { slots: 1, threads: 1, alias: "check", promptCache: { bytes: 0, checkpoints: 0 } };
  const spec = runnerSpec({ id: "check", ggufPath: "check.gguf" }, "completion", settings, launch, 0);
  const spelled = spellFor(buildLlamaServerArgs(spec, "check.sock"), new Set(build.flags));
  return spelled.missing === undefined ? undefined : `llama-server ${build.name} (${build.version}) has no flag ${spelled.missing}: choose another engine for this model, or drop the setting`;
}

export { BUILTIN, type EngineRecord } from "./store.ts";
export type { EngineEvent } from "./events.ts";

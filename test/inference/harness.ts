import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MODEL_MEDIA, pushModel, startRegistry, type Registry } from "../support/registry.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { tinyLlamaGguf, type TinyGgufOptions } from "../support/tiny-gguf.ts";

// The whole model runner as users run it: src/index.ts as a child process, its store pulled from a
// real registry, real llama-server runners. Everything lives in one temporary folder, kept across
// restarts of the server (settings must survive them).

export type Stack = {
  url: string;
  socket: string;
  dir: string;
  server: ServerProcess;
  /** The registry the models were pulled from (engine builds may be published there too). */
  registry: Registry;
  /** Stops the server (SIGTERM: it stops its runners) and starts it again on the same folder. */
  restart(env?: Record<string, string>): Promise<void>;
  /** Pids of the llama-server runners now alive, from the supervisor's pid files. */
  runnerPids(): Promise<number[]>;
  /** Every runner log written so far, one after the other. */
  runnerLogs(): Promise<string>;
  stop(): Promise<void>;
};

export type StackOptions = {
  runtime?: RuntimeName;
  /** Repositories to push as tiny models and pull into the store, e.g. `ai/tiny`. */
  models: string[];
  /** Further repositories pushed as embedding models (declaring mean pooling). */
  embedders?: string[];
  /** Further repositories pushed as tiny rerankers (rank pooling and a classifier head). */
  rerankers?: string[];
  /** Further repositories pushed as tiny models but not pulled (for tests that pull them). */
  unpulled?: string[];
  /**
   * Further repositories pushed with a multimodal projector layer beside tiny weights: the
   * projector's bytes (beside the default tiny model), or the projector and the text model's shape
   * (a working projector's output width must be the model's embedding length).
   */
  withProjector?: Record<string, Uint8Array | { projector: Uint8Array; model: TinyGgufOptions }>;
  /** Further repositories pushed as tiny models of a given shape. */
  shaped?: Record<string, TinyGgufOptions>;
  env?: Record<string, string>;
  /** The server's entry script, when not src/index.ts (the Node bundle, dist/node/index.js). */
  entry?: string;
};

export async function startStack(options: StackOptions): Promise<Stack> {
  const registry = await startRegistry();
  const dir = await mkdtemp(join(tmpdir(), "llamadock-inf-"));
  let server: ServerProcess | undefined;
  try {
    for (const [i, repository] of options.models.entries()) {
      await pushModel(registry, repository, "latest", tinyLlamaGguf({ seed: i + 1 }));
    }
    for (const repository of options.embedders ?? []) {
      await pushModel(registry, repository, "latest", tinyLlamaGguf({ seed: 11, meanPooling: true }));
    }
    for (const [i, repository] of (options.unpulled ?? []).entries()) {
      await pushModel(registry, repository, "latest", tinyLlamaGguf({ seed: 31 + i }));
    }
    for (const repository of options.rerankers ?? []) {
      await pushModel(registry, repository, "latest", tinyLlamaGguf({ seed: 21, reranker: true }));
    }
    const withProjector = Object.entries(options.withProjector ?? {});
    for (const [repository, given] of withProjector) {
      const { projector, model } = given instanceof Uint8Array ? { projector: given, model: {} } : given;
      await pushModel(registry, repository, "latest", tinyLlamaGguf(model), { layers: [{ mediaType: MODEL_MEDIA.mmproj, data: projector }] });
    }
    const shaped = Object.entries(options.shaped ?? {});
    for (const [repository, shape] of shaped) await pushModel(registry, repository, "latest", tinyLlamaGguf(shape));
    const launch = async (env: Record<string, string> = {}) => {
      server = await startRunnerService(options.runtime ?? "bun", dir, registry, { ...options.env, ...env }, options.entry);
      return /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
    };
    let url = await launch();
    const pulled = [...options.models, ...(options.embedders ?? []), ...(options.rerankers ?? []), ...withProjector.map(([r]) => r), ...shaped.map(([r]) => r)];
    for (const repository of pulled) await pullModel(url, repository);
    const stack: Stack = {
      get url() {
        return url;
      },
      socket: join(dir, "runner.sock"),
      dir,
      registry,
      get server() {
        return server!;
      },
      async restart(env) {
        await server!.stop(10_000);
        url = await launch(env);
      },
      runnerPids: () => runnerPids(join(dir, "run")),
      runnerLogs: () => allText(join(dir, "logs")),
      async stop() {
        await server?.stop(10_000);
        await registry.stop();
        await rm(dir, { recursive: true, force: true });
      },
    };
    return stack;
  } catch (error) {
    await server?.stop(5_000);
    await registry.stop();
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

/** The model runner's settings for a stack's folder: its store, sockets, logs and settings file there. */
export function runnerServiceEnv(dir: string, registry: Pick<Registry, "host">, socket = join(dir, "runner.sock")): Record<string, string> {
  return {
    SERVICES: "runner",
    RUNNER_PORT: "0",
    RUNNER_SOCKET: socket,
    MODELS_PATH: join(dir, "models"),
    DEFAULT_REGISTRY: registry.host,
    INFERENCE_RUNTIME_DIR: join(dir, "run"),
    INFERENCE_LOG_DIR: join(dir, "logs"),
    INFERENCE_SETTINGS_PATH: join(dir, "engine-settings.json"),
    // One compute thread per runner, as the cores' share gives each of two runners here: a second
    // runner then never replaces the first (tests of sharing the cores unset this).
    INFERENCE_THREADS: "1",
  };
}

export function startRunnerService(runtime: RuntimeName, dir: string, registry: Registry, env: Record<string, string>, entry?: string) {
  return startServer({
    runtime,
    ...(entry ? { entry } : {}),
    ...(runtime === "deno" ? { runtimeArgs: denoPermissions(["--allow-read", "--allow-write", "--allow-run", "--allow-sys"]) } : {}),
    env: { ...runnerServiceEnv(dir, registry), ...env },
    ready: [/model runner service listening on http:\/\/[\d.]+:\d+/, /model runner service listening on unix:/],
  });
}

async function pullModel(url: string, repository: string): Promise<void> {
  const response = await fetch(`${url}/models/create`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ from: repository }),
  });
  const text = await response.text();
  if (response.status !== 200 || !text.includes('"success"')) throw new Error(`pull of ${repository}: ${response.status} ${text}`);
}

async function allText(folder: string): Promise<string> {
  const names = await readdir(folder).catch(() => [] as string[]);
  const texts = await Promise.all(names.map((name) => readFile(join(folder, name), "utf8")));
  return texts.join("\n");
}

async function runnerPids(runDir: string): Promise<number[]> {
  const names = await readdir(runDir).catch(() => [] as string[]);
  const pids: number[] = [];
  for (const name of names.filter((n) => n.endsWith(".pid"))) {
    // A runner that stops between the listing and the read takes its pid file with it.
    const text = await readFile(join(runDir, name), "utf8").catch(() => undefined);
    const record = text ? (JSON.parse(text) as { pid: number }) : undefined;
    if (record && isAlive(record.pid)) pids.push(record.pid);
  }
  return pids;
}

/** Whether a process with this pid exists (signal 0). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * llama-server's `ignore_eos`: the tiny random-weight model may sample end-of-sequence at any step
 * (about 1 in 259), which would leave a test's expected length or finish_reason to chance.
 */
export const NO_EARLY_STOP = { ignore_eos: true } as const;

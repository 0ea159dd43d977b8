import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { startServer, type RuntimeName, type ServerProcess } from "./server-process.ts";

// A replica as a pool runs one on a shared volume: a model runner on the store in `dir`/models,
// with sockets, runners, logs and settings of its own in `dir`/`name`.

/** Deno as the docs run it: --allow-sys gives it the host name, by which it judges the others' locks. */
const DENO_FLAGS = ["--allow-net", "--allow-env", "--allow-sys", "--allow-read", "--allow-write", "--allow-run", "--unstable-no-legacy-abort"];

export type Replica = { url: string; server: ServerProcess };

export async function startReplica(dir: string, name: string, runtime: RuntimeName, registryHost: string, env: Record<string, string> = {}): Promise<Replica> {
  const own = join(dir, name);
  await mkdir(own, { recursive: true });
  const server = await startServer({
    runtime,
    ...(runtime === "deno" ? { runtimeArgs: DENO_FLAGS } : {}),
    env: {
      SERVICES: "runner",
      RUNNER_PORT: "0",
      RUNNER_SOCKET: join(own, "runner.sock"),
      MODELS_PATH: join(dir, "models"),
      DEFAULT_REGISTRY: registryHost,
      INFERENCE_RUNTIME_DIR: join(own, "run"),
      INFERENCE_LOG_DIR: join(own, "logs"),
      INFERENCE_SETTINGS_PATH: join(own, "engine-settings.json"),
      INFERENCE_THREADS: "1",
      ...env,
    },
    ready: [/model runner service listening on http:\/\/[\d.]+:\d+/, /model runner service listening on unix:/],
  });
  return { url: /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!, server };
}

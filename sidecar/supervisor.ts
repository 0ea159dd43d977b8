import { join } from "node:path";
import { platform } from "node:os";
import { env as processEnv } from "node:process";
import * as z from "zod";
import { clearStaleSocket } from "../src/runtime/socket-file.ts";
import type { ChildProcess, Runtime } from "../src/runtime/types.ts";
import { buildLlamaServerArgs } from "./args.ts";
import { findOnPath, launchEnv, type LlamaServerBinary } from "./binary.ts";
import { SidecarError } from "./errors.ts";
import { cleanupLeftovers, pidFilePath, writePidFile } from "./leftovers.ts";
import { DEFAULT_LOGS_KEPT, pruneLogs } from "./log-files.ts";
import { RunnerOutput } from "./output.ts";
import { SidecarProcess, type Sidecar } from "./process.ts";
import { linkShards, unlinkShards } from "./shards.ts";
import { runnerSpecSchema, type EngineBuild, type RunnerSpec } from "./spec.ts";
import { spellFor } from "./flag-names.ts";

export interface SupervisorDeps {
  runtime: Runtime;
  binary: LlamaServerBinary;
  /** Sockets and pid files; keep the path short (a socket path has at most 107 bytes). */
  runDir: string;
  /** One bounded log per runner, `<name>.log`. */
  logDir: string;
  /** Runner logs kept in `logDir` (live runners' always); default DEFAULT_LOGS_KEPT. */
  logsKept?: number;
  /** How long a model may take to load. Default: 5 minutes. */
  readyTimeoutMs?: number;
  /** Between SIGTERM and SIGKILL on stop. Default: 5 s. */
  stopGraceMs?: number;
}

export interface Supervisor {
  /** Starts one runner and resolves once it answers /health with 200; rejects with a SidecarError. */
  start(spec: RunnerSpec, signal?: AbortSignal): Promise<Sidecar>;
  /** Ends runners and removes files that a previous run of ours left behind; call it before any start. */
  cleanupLeftovers(): Promise<void>;
}

const MAX_SOCKET_PATH = 107;

/**
 * On Linux, llama-server is started through `setpriv --pdeathsig KILL`, so the kernel kills it when
 * our process dies, however it dies; cleanupLeftovers() on the next start is the net when setpriv is
 * missing. Elsewhere nothing ends an orphaned runner: cleanupLeftovers() needs /proc (Linux only)
 * to tell it from an unrelated process, so there it leaves a live one alone.
 */
function parentDeathPrefix(): string[] {
  if (platform() !== "linux") return [];
  const setpriv = findOnPath("setpriv", processEnv);
  return setpriv ? [setpriv, "--pdeathsig", "KILL", "--"] : [];
}

function parseSpec(input: RunnerSpec): RunnerSpec {
  const parsed = runnerSpecSchema.safeParse(input);
  if (!parsed.success) throw new SidecarError("bad_argument", `invalid runner spec: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}

async function claimSocket(socketPath: string, name: string): Promise<void> {
  if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH) {
    throw new SidecarError("bad_argument", `socket path too long (max ${MAX_SOCKET_PATH} bytes): ${socketPath}`);
  }
  try {
    await clearStaleSocket(socketPath);
  } catch {
    throw new SidecarError("socket_in_use", `runner ${name} is already running (${socketPath} answers)`);
  }
}

export function createSupervisor(deps: SupervisorDeps): Supervisor {
  const { runtime, binary, runDir, logDir } = deps;
  const prefix = parentDeathPrefix();
  /** The names of the runners started here and not yet exited: their logs are never pruned. */
  const live = new Set<string>();

  async function spawn(engine: Pick<EngineBuild, "path" | "libraryDirs">, args: string[], output: RunnerOutput): Promise<ChildProcess> {
    const [command, ...rest] = [...prefix, engine.path, ...args] as [string, ...string[]];
    try {
      const child = await runtime.spawn(command, rest, { env: launchEnv(engine.path, processEnv, engine.libraryDirs), ...(output.descriptor !== undefined ? { output: output.descriptor } : {}) });
      if (child.wroteToOutput) output.writtenByChild();
      return child;
    } catch (error) {
      output.close();
      throw new SidecarError("spawn_failed", `cannot start ${engine.path}: ${(error as Error).message}`);
    }
  }

  async function start(input: RunnerSpec, signal?: AbortSignal): Promise<Sidecar> {
    const spec = parseSpec(input);
    if (signal?.aborted) throw new SidecarError("aborted", `start of runner ${spec.name} aborted`);
    const socketPath = join(runDir, `${spec.name}.sock`);
    await claimSocket(socketPath, spec.name);
    const modelPath = spec.modelShards?.length ? await linkShards(runDir, spec.name, [spec.modelPath, ...spec.modelShards]) : spec.modelPath;
    const engine = spec.engine ?? { name: "builtin", path: binary.path, version: binary.version };
    let args: string[];
    try {
      args = spelledFor(engine, buildLlamaServerArgs({ ...spec, modelPath }, socketPath));
    } catch (error) {
      if (spec.modelShards?.length) await unlinkShards(runDir, spec.name);
      throw error;
    }
    await pruneLogs(logDir, deps.logsKept ?? DEFAULT_LOGS_KEPT, live);
    const output = new RunnerOutput(join(logDir, `${spec.name}.log`));
    output.write(`--- ${new Date().toISOString()} llama-server ${engine.version} (${engine.name}): ${args.join(" ")}\n`);
    live.add(spec.name);
    let child: ChildProcess;
    try {
      child = await spawn(engine, args, output);
    } catch (error) {
      live.delete(spec.name);
      if (spec.modelShards?.length) await unlinkShards(runDir, spec.name);
      throw error;
    }
    const exited = () => {
      live.delete(spec.name);
      if (spec.modelShards?.length) void unlinkShards(runDir, spec.name).catch(() => {});
    };
    child.exited.then(exited, exited);
    const pidFile = pidFilePath(runDir, spec.name);
    const sidecar = new SidecarProcess({
      name: spec.name,
      child,
      socketPath,
      pidFile,
      output,
      fetch: runtime.unixFetch(socketPath),
      stopGraceMs: deps.stopGraceMs ?? 5_000,
    });
    await recordPid(sidecar, pidFile);
    await sidecar.untilReady(deps.readyTimeoutMs ?? 300_000, signal);
    return sidecar;
  }

  /** The argv in the flags the build lists, when they are known; a flag it has no spelling of is refused unrun. */
  function spelledFor(engine: EngineBuild, args: string[]): string[] {
    if (!engine.flags) return args;
    const spelled = spellFor(args, new Set(engine.flags));
    if (spelled.missing !== undefined) throw new SidecarError("bad_argument", `llama-server ${engine.name} (${engine.version}) has no flag ${spelled.missing}`);
    return spelled.args;
  }

  /** Writes the runner's pid file; if that fails, stops the runner rather than leave it unrecorded. */
  async function recordPid(sidecar: SidecarProcess, pidFile: string): Promise<void> {
    try {
      writePidFile(pidFile, { pid: sidecar.pid, socket: sidecar.socketPath });
    } catch (error) {
      await sidecar.stop();
      throw new SidecarError("spawn_failed", `cannot write ${pidFile}: ${(error as Error).message}`, sidecar.logTail());
    }
  }

  return { start, cleanupLeftovers: () => cleanupLeftovers(runDir) };
}

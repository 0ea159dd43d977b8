import { statSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import * as z from "zod";
import type { Runtime } from "../src/runtime/types.ts";
import { parseHelpFlags } from "./flag-names.ts";

// Where the llama-server binary comes from, in order: LLAMA_SERVER_PATH (the binary or its folder),
// `llama-server` on PATH, then the build that `npm run sidecar:build` caches per llama.cpp release.

/** The llama.cpp release this project is tested with (and that sidecar:build builds). */
export const LLAMA_CPP_RELEASE = "v0.5.0";

export interface LlamaServerBinary {
  path: string;
  /** As `llama-server --version` reports it, e.g. `0.5.0-dev (build 1, commit de3ff81)`. */
  version: string;
  source: "LLAMA_SERVER_PATH" | "PATH" | "cache";
}

type Env = Record<string, string | undefined>;

const envSchema = z.object({
  LLAMA_SERVER_PATH: z.string().min(1).optional(),
  PATH: z.string().optional(),
  LLAMADOCK_CACHE: z.string().min(1).optional(),
  XDG_CACHE_HOME: z.string().min(1).optional(),
  HOME: z.string().min(1).optional(),
});

const VERSION_TIMEOUT_MS = 15_000;

// By mode bits, not access(2): Deno's accessSync needs the extra --allow-sys permission.
function isExecutableFile(path: string): boolean {
  try {
    const stat = statSync(path);
    return stat.isFile() && (stat.mode & 0o111) !== 0;
  } catch {
    return false;
  }
}

/** The folder where sidecar/build-llama-server.sh leaves the binary (keep the two in step). */
export function cachedBuildDir(env: Env): string {
  const vars = envSchema.parse(env);
  const root = vars.LLAMADOCK_CACHE ?? join(vars.XDG_CACHE_HOME ?? join(vars.HOME ?? homedir(), ".cache"), "llamadock");
  return join(root, `llama.cpp-${LLAMA_CPP_RELEASE}`, "bin");
}

/** The first executable `name` in the folders of PATH. */
export function findOnPath(name: string, env: Env): string | undefined {
  const { PATH } = envSchema.parse(env);
  for (const dir of (PATH ?? "").split(delimiter).filter(Boolean)) {
    if (isExecutableFile(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

function locate(env: Env): { path: string; source: LlamaServerBinary["source"] } {
  const vars = envSchema.parse(env);
  if (vars.LLAMA_SERVER_PATH) {
    const given = vars.LLAMA_SERVER_PATH;
    const path = isExecutableFile(given) ? given : join(given, "llama-server");
    if (!isExecutableFile(path)) throw new Error(`LLAMA_SERVER_PATH: no executable llama-server at ${given}`);
    return { path, source: "LLAMA_SERVER_PATH" };
  }
  const onPath = findOnPath("llama-server", env);
  if (onPath) return { path: onPath, source: "PATH" };
  const cached = join(cachedBuildDir(env), "llama-server");
  if (isExecutableFile(cached)) return { path: cached, source: "cache" };
  throw new Error(
    "no llama-server found: set LLAMA_SERVER_PATH, put llama-server on PATH, or run `npm run sidecar:build`",
  );
}

/**
 * The environment llama-server runs with: ours, plus its own folder on the library path, since a
 * llama.cpp build keeps its shared libraries (libllama.so, libggml*.so) beside the binary, and the
 * folders a build's layout names besides (Docker Model Runner's keep them in `lib/` beside `bin/`).
 */
export function launchEnv(binaryPath: string, env: Env, libraryDirs: string[] = []): Record<string, string> {
  const result: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) if (value !== undefined) result[key] = value;
  const libraryPath = [dirname(binaryPath), ...libraryDirs, env.LD_LIBRARY_PATH].filter(Boolean).join(delimiter);
  return { ...result, LD_LIBRARY_PATH: libraryPath };
}

async function readAll(stream: ReadableStream<Uint8Array>): Promise<string> {
  return new Response(stream).text();
}

/**
 * The version in `llama-server --version`'s output. llama.cpp prints it through its log thread,
 * which now and then has already turned on its line prefix (`0.00.001.982 I `) when the line goes
 * out, so the prefix may stand before it.
 */
export function parseVersion(output: string): string | undefined {
  return /^(?:[\d.]+ [A-Z] )?version: (.+)$/m.exec(output)?.[1]?.trim() || undefined;
}

async function reportedVersion(runtime: Runtime, path: string, env: Env, libraryDirs: string[] = []): Promise<string> {
  const child = await runtime.spawn(path, ["--version"], { env: launchEnv(path, env, libraryDirs) });
  const timer = setTimeout(() => child.kill("SIGKILL"), VERSION_TIMEOUT_MS);
  const [out, err, exit] = await Promise.all([readAll(child.stdout), readAll(child.stderr), child.exited]);
  clearTimeout(timer);
  const version = parseVersion(`${out}\n${err}`);
  if (exit.code !== 0 || !version) {
    throw new Error(`${path} --version failed (${exit.signal ?? `code ${exit.code}`}): ${err.trim().slice(-500)}`);
  }
  return version;
}

/** What a build says of itself: its version and the flags its `--help` lists (proves it starts, too). */
export async function describeBuild(runtime: Runtime, path: string, env: Env, libraryDirs: string[] = []): Promise<{ version: string; flags: string[] }> {
  const version = await reportedVersion(runtime, path, env, libraryDirs);
  const child = await runtime.spawn(path, ["--help"], { env: launchEnv(path, env, libraryDirs) });
  const timer = setTimeout(() => child.kill("SIGKILL"), VERSION_TIMEOUT_MS);
  const [out, err, exit] = await Promise.all([readAll(child.stdout), readAll(child.stderr), child.exited]);
  clearTimeout(timer);
  const flags = parseHelpFlags(`${out}\n${err}`);
  if (exit.code !== 0 || flags.length === 0) throw new Error(`${path} --help failed (${exit.signal ?? `code ${exit.code}`}): ${err.trim().slice(-500)}`);
  return { version, flags };
}

/** Finds the llama-server to run and asks it for its version (which also proves it starts). */
export async function resolveLlamaServerBinary(deps: { runtime: Runtime; env: Env }): Promise<LlamaServerBinary> {
  const { path, source } = locate(deps.env);
  return { path, source, version: await reportedVersion(deps.runtime, path, deps.env) };
}

/** The devices under `Available devices:` in `llama-server --list-devices` (`CUDA0: NVIDIA ...`). */
export function parseListDevices(output: string): string[] {
  const after = output.split(/^Available devices:\s*$/m)[1] ?? "";
  return after
    .split("\n")
    .map((line) => /^\s+(\w+\d*): (.+)$/.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => `${match[1]}: ${match[2]!.trim()}`);
}

/** The GPUs this llama-server can offload to: none for a CPU-only build (or when it cannot say). */
export async function offloadDevices(runtime: Runtime, binary: LlamaServerBinary, env: Env): Promise<string[]> {
  try {
    const child = await runtime.spawn(binary.path, ["--list-devices"], { env: launchEnv(binary.path, env) });
    const timer = setTimeout(() => child.kill("SIGKILL"), VERSION_TIMEOUT_MS);
    const [out, err] = await Promise.all([readAll(child.stdout), readAll(child.stderr), child.exited]);
    clearTimeout(timer);
    return parseListDevices(`${out}\n${err}`);
  } catch {
    return [];
  }
}

import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { bunAllocatorDefaults } from "../../src/runtime/bun-allocator.ts";

// Starts `src/index.ts` (or another entry) as a child process under Bun, Deno or Node, the
// binaries the project installs in node_modules/.bin, and waits until it says it listens.

export type RuntimeName = "bun" | "deno" | "node";

export const projectRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

export type ServerOptions = {
  runtime: RuntimeName;
  /** Entry script, relative to the project root. */
  entry?: string;
  /** Extra env, on top of this process's env (a value of `undefined` removes a variable). */
  env?: Record<string, string | undefined>;
  /** Arguments after the entry script, e.g. `--photos.api.base-url=...`. */
  args?: string[];
  /** Flags before the entry script, for the runtime itself; Deno's default is `denoPermissions`. */
  runtimeArgs?: string[];
  /** Output that means "ready"; resolved once every pattern has matched (default: one "listening"). */
  ready?: RegExp[];
  /** How long to wait for readiness before failing. */
  startTimeoutMs?: number;
  /** A command that runs the runtime's command line where it must run (e.g. `nsenter` into a namespace). */
  prefix?: string[];
};

export type ServerProcess = {
  readonly child: ChildProcess;
  readonly pid: number;
  /** Everything written to stdout and stderr so far, interleaved. */
  output(): string;
  /** Resolves when `pattern` shows up in the output (already there counts). */
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Resolves with the exit code (or signal name) once the process has exited. */
  exited: Promise<number | string>;
  /** SIGTERM, wait up to `graceMs`, then SIGKILL; resolves with how it exited. */
  stop(graceMs?: number): Promise<number | string>;
};

/**
 * Deno flags for our entry when a test gives none: net, env, and the home folder's path (config
 * derives the default socket path from it). Tests that want the narrowest set pass `runtimeArgs`.
 * `--unstable-no-legacy-abort`: `request.signal` then aborts only when the client goes away.
 */
export const denoPermissions = (extra: string[] = []) => [
  "--allow-net",
  "--allow-env",
  "--allow-sys=homedir",
  "--unstable-no-legacy-abort",
  ...extra,
];

export const runtimeBinary = (runtime: RuntimeName) => join(projectRoot, "node_modules", ".bin", runtime);

/** The runtime's arguments that run `entry` (default src/index.ts) with `runtimeArgs` and `args`, for a server or a script run to its end. */
export function commandLine(options: Pick<ServerOptions, "runtime" | "entry" | "args" | "runtimeArgs">): string[] {
  const entry = options.entry ?? "src/index.ts";
  const runtimeArgs = options.runtimeArgs ?? (options.runtime === "deno" ? denoPermissions() : []);
  const verb = options.runtime === "node" ? [] : ["run"];
  return [...verb, ...runtimeArgs, entry, ...(options.args ?? [])];
}

function childEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1" };
  for (const [key, value] of Object.entries(extra)) {
    if (value === undefined) delete env[key];
    else env[key] = value;
  }
  return env;
}

/**
 * Our server under Bun starts with the allocator settings its launchers give it (npm start,
 * bin/llamadock, the image: src/runtime/bun-allocator.ts); a bench's floors and the tests' own
 * fixtures start as plain scripts do.
 */
export function launchEnv(options: Pick<ServerOptions, "runtime" | "entry" | "env">): Record<string, string | undefined> {
  const ours = options.runtime === "bun" && !/^(bench|test)\//.test(options.entry ?? "");
  return ours ? { ...bunAllocatorDefaults({ ...process.env, ...options.env }), ...options.env } : (options.env ?? {});
}

/** Starts the process; rejects (after killing it) if it exits or stays silent before it is ready. */
export async function startServer(options: ServerOptions): Promise<ServerProcess> {
  const [command, ...args] = [...(options.prefix ?? []), runtimeBinary(options.runtime), ...commandLine(options)];
  const child = spawn(command!, args, {
    cwd: projectRoot,
    env: childEnv(launchEnv(options)),
    stdio: ["ignore", "pipe", "pipe"],
  });
  const server = watch(child);
  const patterns = options.ready ?? [/listening/];
  try {
    for (const pattern of patterns) await server.waitForOutput(pattern, options.startTimeoutMs ?? 30_000);
  } catch (error) {
    await server.stop(1_000);
    throw error;
  }
  return server;
}

/** Wraps an already spawned child: output capture, waiting for output, and stopping. */
export function watch(child: ChildProcess): ServerProcess {
  let text = "";
  const waiters = new Set<() => void>();
  const append = (chunk: Buffer) => {
    text += chunk.toString("utf8");
    for (const check of waiters) check();
  };
  child.stdout?.on("data", append);
  child.stderr?.on("data", append);
  child.on("error", (error) => append(Buffer.from(`spawn failed: ${error.message}\n`)));
  const exited: Promise<number | string> = once(child, "close").then(
    ([code, signal]) => (code ?? signal) as number | string,
  );

  function waitForOutput(pattern: RegExp, timeoutMs = 30_000): Promise<string> {
    return new Promise((resolve, reject) => {
      const done = (error?: Error) => {
        waiters.delete(check);
        clearTimeout(timer);
        if (error) reject(error);
        else resolve(text);
      };
      const check = () => {
        if (pattern.test(text)) done();
      };
      const timer = setTimeout(() => done(new Error(`no ${pattern} within ${timeoutMs} ms; output:\n${text}`)), timeoutMs);
      void exited.then((how) => {
        if (!pattern.test(text)) done(new Error(`exited (${how}) before ${pattern}; output:\n${text}`));
      });
      waiters.add(check);
      check();
    });
  }

  async function stop(graceMs = 10_000): Promise<number | string> {
    if (child.exitCode !== null || child.signalCode !== null) return exited;
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
    try {
      return await exited;
    } finally {
      clearTimeout(timer);
    }
  }

  return { child, pid: child.pid ?? -1, output: () => text, waitForOutput, exited, stop };
}

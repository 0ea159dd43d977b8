import { closeSync, openSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { launchEnv } from "../sidecar/binary.ts";
import { resolveLlamaServerBinary } from "../sidecar/index.ts";
import type { Runtime } from "../src/runtime/types.ts";
import { removeSocket } from "../src/runtime/socket-file.ts";
import type { Stack } from "../test/inference/harness.ts";

// The baseline of the benches that compare us with llama-server itself: a second llama-server
// started with the very command line of the stack's runner (read from its process), on a socket of
// its own, so that both sides run the same build with the same flags.

export type DirectRunner = { fetchVia: typeof fetch; stop(): Promise<void> };

export async function startDirectRunner(stack: Stack, runtime: Runtime): Promise<DirectRunner> {
  const [pid] = await stack.runnerPids();
  const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).slice(1);
  const socketPath = join(stack.dir, "run", "direct.sock");
  args[args.indexOf("--host") + 1] = socketPath;
  const binary = await resolveLlamaServerBinary({ runtime, env: process.env });
  // Its output to a file, as our runners' (piped and unread, it would stall llama-server once the pipe is full).
  const output = openSync(join(stack.dir, "logs", "direct.log"), "a");
  const child = await runtime.spawn(binary.path, args, { env: launchEnv(binary.path, process.env), output });
  const fetchVia = runtime.unixFetch(socketPath);
  for (;;) {
    const status = await fetchVia("http://runner/health").then((r) => (r.body?.cancel(), r.status), () => 0);
    if (status === 200) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    fetchVia,
    async stop() {
      child.kill("SIGTERM");
      await child.exited;
      closeSync(output);
      removeSocket(socketPath);
    },
  };
}

/** A fetch straight to the stack's own runner, over its socket (to read its /metrics, say). */
export function ourRunnerFetch(stack: Stack, runtime: Runtime): typeof fetch {
  const run = join(stack.dir, "run");
  const socket = readdirSync(run).find((name) => name.endsWith(".sock") && name !== "direct.sock");
  if (!socket) throw new Error("the stack has no runner loaded");
  return runtime.unixFetch(join(run, socket));
}

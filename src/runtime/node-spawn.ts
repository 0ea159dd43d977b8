import { spawn as spawnChild } from "node:child_process";
import { once } from "node:events";
import { Readable } from "node:stream";
import { endedStream, type ChildExit, type ChildProcess, type SpawnOptions } from "./types.ts";

/**
 * Spawning with node:child_process: Node's always, and Deno's for a child that writes its output
 * to a file itself (Deno.Command can only pipe it, through our event loop: llama-server writes
 * about ten lines per request).
 */
export async function nodeSpawn(command: string, args: string[], options: SpawnOptions): Promise<ChildProcess> {
  const out = options.output ?? "pipe";
  const child = spawnChild(command, args, { env: options.env, stdio: ["ignore", out, out] });
  // "close" (not "exit"): by then stdout and stderr are drained, so the caller sees all output.
  // A plain listener, not once(): that would also reject on a failed spawn, unhandled.
  const exited = new Promise<ChildExit>((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
  await once(child, "spawn"); // rejects with the "error" event (ENOENT, EACCES...)
  // From here "error" only means a signal could not be sent; kill() reports that by returning false.
  child.on("error", () => {});
  return {
    pid: child.pid as number,
    stdout: child.stdout ? (Readable.toWeb(child.stdout) as unknown as ReadableStream<Uint8Array>) : endedStream(),
    stderr: child.stderr ? (Readable.toWeb(child.stderr) as unknown as ReadableStream<Uint8Array>) : endedStream(),
    wroteToOutput: options.output !== undefined,
    exited,
    kill: (signal) => void child.kill(signal),
  };
}

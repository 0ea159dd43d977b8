import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { ask, type Target } from "../support/http.ts";
import type { Stack } from "./harness.ts";

// Looking at a model's runner from outside, the way an operator would: its pid file and socket in
// the runtime folder (named after the model id) and llama-server's own endpoints on that socket.

export async function modelId(stack: Stack, name: string): Promise<string> {
  const answer = await ask({ url: stack.url }, "GET", `/models/${name}`);
  return answer.json().id as string;
}

async function runnerFiles(stack: Stack, name: string, ext: string): Promise<string[]> {
  const prefix = (await modelId(stack, name)).replace(/^sha256:/, "").slice(0, 12);
  const files = await readdir(join(stack.dir, "run")).catch(() => [] as string[]);
  return files.filter((f) => f.startsWith(`${prefix}-completion-`) && f.endsWith(ext)).map((f) => join(stack.dir, "run", f));
}

/** The model's completion runner's socket (the newest, if a reloaded one still lingers). */
export async function runnerSocket(stack: Stack, name: string): Promise<Target> {
  const sockets = await runnerFiles(stack, name, ".sock");
  return { socketPath: sockets.sort().at(-1)! };
}

export async function runnerPid(stack: Stack, name: string): Promise<number> {
  const pidFiles = await runnerFiles(stack, name, ".pid");
  return (JSON.parse(await readFile(pidFiles.sort().at(-1)!, "utf8")) as { pid: number }).pid;
}

/** How many of the runner's llama-server slots are generating. */
export async function busySlots(runner: Target): Promise<number> {
  const slots = (await ask(runner, "GET", "/slots")).json() as { is_processing: boolean }[];
  return slots.filter((s) => s.is_processing).length;
}

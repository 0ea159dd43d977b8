import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { resolveLlamaServerBinary, type LlamaServerBinary } from "../../sidecar/index.ts";
import { detectRuntime, type Runtime } from "../../src/runtime/index.ts";
import { writeTinyLlamaGguf } from "../support/tiny-gguf.ts";

/** A temp folder with the tiny model, a run folder and a log folder, and the real llama-server. */
export interface SidecarWorld {
  runtime: Runtime;
  binary: LlamaServerBinary;
  dir: string;
  modelPath: string;
  runDir: string;
  logDir: string;
  remove(): Promise<void>;
}

export async function sidecarWorld(): Promise<SidecarWorld> {
  const runtime = await detectRuntime();
  const binary = await resolveLlamaServerBinary({ runtime, env: process.env });
  const dir = await mkdtemp(join(tmpdir(), "llamadock-sidecar-"));
  const modelPath = join(dir, "tiny.gguf");
  await writeTinyLlamaGguf(modelPath);
  const runDir = join(dir, "run");
  const logDir = join(dir, "logs");
  await mkdir(runDir);
  return { runtime, binary, dir, modelPath, runDir, logDir, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** True once `pid` no longer runs (gone, or a zombie nobody reaped yet). */
export function isGone(pid: number): boolean {
  if (!existsSync(`/proc/${pid}`)) return true;
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true;
  }
}

/** The pids of the processes whose command line has `--host <socketPath>`. */
export function runnersOn(socketPath: string): number[] {
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
        return args[args.indexOf("--host") + 1] === socketPath && !isGone(Number(pid));
      } catch {
        return false; // it ended while we looked
      }
    })
    .map(Number);
}

/** Polls `check` until it holds or `limitMs` passes; returns whether it held. */
export async function eventually(check: () => boolean, limitMs = 15_000): Promise<boolean> {
  const deadline = Date.now() + limitMs;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

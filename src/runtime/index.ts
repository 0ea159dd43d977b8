import type { Runtime } from "./types.ts";

export type * from "./types.ts";

/** Picks the adapter of the runtime we run on; only that adapter's module is ever loaded. */
export async function detectRuntime(): Promise<Runtime> {
  if ("Bun" in globalThis) return (await import("./bun.ts")).bunRuntime;
  if ("Deno" in globalThis) return (await import("./deno.ts")).denoRuntime;
  return (await import("./node.ts")).nodeRuntime;
}

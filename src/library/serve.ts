import { detectRuntime } from "../runtime/index.ts";
import type { ListenTarget } from "../runtime/types.ts";
import { serveOptions, shutDown } from "../service.ts";
import type { LibraryService } from "./open.ts";

// What a module served by the runtime's own server (`bun <module>`, `deno serve <module>`) exports
// by default, and the shutdown it wires: that server is not ours to close, so on SIGINT or SIGTERM
// the service drains (new requests get 503), stops what it started, and the process exits.

/**
 * The default export of such a module: Deno reads `fetch`; Bun reads all of it as Bun.serve's
 * options, and gets the limits the standalone server's listeners have on Bun.
 */
export type ServedModule = { fetch: (...args: never[]) => Response | Promise<Response>; hostname: string; port: number } & Record<string, unknown>;

export async function servedByRuntime(service: LibraryService): Promise<ServedModule> {
  const runtime = await detectRuntime();
  runtime.onShutdownSignal(async (signal) => {
    console.log(`${signal} received: finishing in-flight requests`);
    await shutDown([service], service.config.shutdownGraceMs);
    console.log("stopped");
    runtime.exit(0);
  });
  // Where the settings say it listens: Bun listens there; `deno serve` takes --host and --port instead.
  const [tcp] = service.targets as [Extract<ListenTarget, { kind: "tcp" }>];
  const own = runtime.ownServerOptions?.(service.fetch, serveOptions(service.config)) ?? { fetch: service.fetch };
  // Bun's development mode off: a handler that threw would answer its stack to the caller as a page.
  return { ...own, hostname: tcp.hostname, port: tcp.port, development: false };
}

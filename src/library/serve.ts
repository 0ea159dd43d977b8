import { detectRuntime } from "../runtime/index.ts";
import { shutDown } from "../service.ts";
import type { LibraryService } from "./open.ts";

// What a module served by the runtime's own server (`bun <module>`, `deno serve <module>`) exports
// by default, and the shutdown it wires: that server is not ours to close, so on SIGINT or SIGTERM
// the service drains (new requests get 503), stops what it started, and the process exits.

/** The default export of such a module: Deno reads `fetch`; Bun reads all of it as `Bun.serve`'s options. */
export type ServedModule = {
  fetch: (request: Request) => Response | Promise<Response>;
  hostname: string;
  port: number;
  /** Bun's: seconds a connection may stay silent; 0 leaves streams that wait long (a prompt being read) open. */
  idleTimeout: number;
  /** Bun's: false, or a handler that throws would answer its stack to the caller as a page. */
  development: false;
};

export async function servedByRuntime(service: LibraryService): Promise<ServedModule> {
  const runtime = await detectRuntime();
  runtime.onShutdownSignal(async (signal) => {
    console.log(`${signal} received: finishing in-flight requests`);
    await shutDown([service], service.config.shutdownGraceMs);
    console.log("stopped");
    runtime.exit(0);
  });
  // Where the settings say it listens: Bun listens there; `deno serve` takes --host and --port instead.
  const tcp = service.targets.find((target) => target.kind === "tcp")!;
  return { fetch: service.fetch, hostname: tcp.hostname, port: tcp.port, idleTimeout: 0, development: false };
}

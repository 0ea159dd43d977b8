import { clearStaleSocket, removeSocket } from "./socket-file.ts";
import type { FetchHandler, ListenTarget, Listener, Runtime } from "./types.ts";

// The few Deno APIs we use, typed here so that the rest of the project needs no Deno types.
interface DenoHttpServer {
  addr: { port?: number };
  finished: Promise<void>;
  shutdown(): Promise<void>;
}
interface DenoApi {
  version: { deno: string };
  serve(options: Record<string, unknown>, handler: FetchHandler): DenoHttpServer;
  createHttpClient(options: { proxy: { transport: "unix"; path: string } }): unknown;
  addSignalListener(signal: "SIGINT" | "SIGTERM", fn: () => void): void;
  exit(code: number): never;
}
declare const Deno: DenoApi;

async function serve(handler: FetchHandler, target: ListenTarget): Promise<Listener> {
  if (target.kind === "unix") await clearStaleSocket(target.path);
  const where =
    target.kind === "tcp"
      ? { port: target.port, hostname: target.hostname }
      : { path: target.path, transport: "unix" };
  const server = Deno.serve({ ...where, onListen() {} }, handler);
  const port = target.kind === "tcp" ? server.addr.port : undefined;
  return {
    address: target.kind === "tcp" ? `http://${target.hostname}:${port}` : `unix:${target.path}`,
    port,
    async close(graceMs = 10_000) {
      // Deno's shutdown waits for in-flight requests; past the grace we stop waiting.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
      await Promise.race([server.shutdown(), grace]);
      clearTimeout(timer);
      if (target.kind === "unix") removeSocket(target.path);
    },
  };
}

function unixFetch(socketPath: string): typeof fetch {
  const client = Deno.createHttpClient({ proxy: { transport: "unix", path: socketPath } });
  return ((input: RequestInfo | URL, init?: RequestInit) =>
    fetch(input, { ...init, client } as RequestInit)) as typeof fetch;
}

export const denoRuntime: Runtime = {
  name: "deno",
  version: Deno.version.deno,
  serve,
  unixFetch,
  onShutdownSignal(fn) {
    let fired = false;
    for (const signal of ["SIGINT", "SIGTERM"] as const) {
      Deno.addSignalListener(signal, () => {
        if (fired) return;
        fired = true;
        fn(signal);
      });
    }
  },
  exit: (code) => Deno.exit(code),
};

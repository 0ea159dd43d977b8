// The one seam between our code and the JavaScript runtime it runs on. Everything runtime-specific
// (listening, fetch over a Unix socket, spawning processes) lives behind this interface, so the
// rest of src/ stays a set of pure fetch handlers that never touch Bun, Deno or Node globals.

/** A service as the fetch standard has it: a Request in, a Response (or its promise) out. */
export type FetchHandler = (request: Request) => Response | Promise<Response>;

export type ListenTarget =
  | { kind: "tcp"; hostname: string; port: number }
  | { kind: "unix"; path: string };

/** What keeps slow or numerous clients from holding a listener. */
export type ServeLimits = {
  /** A request's headers must arrive within this (slowloris); an idle keep-alive connection closes after it. */
  headersTimeoutMs: number;
  /**
   * A request body that stops arriving for this long (while we wait for it) fails its reads with
   * `stalledBody`; one never read is cut after as long a silence. No total: a body may take hours.
   */
  bodyIdleTimeoutMs: number;
  /**
   * Connections (Node, and Deno, which serves through node:http) or requests in flight (Bun, whose
   * server does not count connections) at once: beyond it, node:http closes a new connection and
   * Bun answers 503.
   */
  maxConnections: number;
};

/** How a listener serves: its limits, and what it answers a request it turns away. */
export type ServeOptions = ServeLimits & {
  /**
   * The answer to a request beyond `maxConnections` where the runtime answers one (Bun; node:http
   * closes the connection instead). The caller's, in its own error shape: the runtime knows none.
   */
  overloaded: (maxConnections: number) => Response;
  /** What a read of a body silent for `bodyIdleTimeoutMs` fails with: the caller's error, which its handler answers. */
  stalledBody: (idleMs: number) => unknown;
};

export interface Listener {
  /** Where it listens, for logs: `http://127.0.0.1:8080` or `unix:/run/x.sock`. */
  readonly address: string;
  /** The bound TCP port (useful when asked for port 0); undefined for a Unix socket. */
  readonly port: number | undefined;
  /** Stops accepting, lets in-flight requests finish (up to `graceMs`), removes a socket file. */
  close(graceMs?: number): Promise<void>;
}

/** How a child process ended: its exit code, or the signal that killed it. */
export interface ChildExit {
  readonly code: number | null;
  readonly signal: string | null;
}

export interface ChildProcess {
  readonly pid: number;
  /** Empty when the output went to `SpawnOptions.output` instead (then `wroteToOutput`). */
  readonly stdout: ReadableStream<Uint8Array>;
  readonly stderr: ReadableStream<Uint8Array>;
  /** The child writes its output to `SpawnOptions.output` itself. */
  readonly wroteToOutput?: boolean;
  /** Settles once, when the process has exited. */
  readonly exited: Promise<ChildExit>;
  kill(signal: "SIGTERM" | "SIGKILL"): void;
}

/** A stream that has ended: the output of a child that writes its output elsewhere. */
export const endedStream = () => new ReadableStream<Uint8Array>({ start: (controller) => controller.close() });

export interface SpawnOptions {
  /** The child's whole environment (nothing is inherited beyond it). */
  env: Record<string, string>;
  /**
   * A file descriptor (open for appending) that the child's stdout and stderr go to directly, past
   * our event loop (every runtime hands it over: Deno through node:child_process).
   */
  output?: number;
}

export interface Runtime {
  readonly name: "bun" | "deno" | "node";
  readonly version: string;
  serve(handler: FetchHandler, target: ListenTarget, options: ServeOptions): Promise<Listener>;
  /**
   * Where the runtime serves a module's default export itself (`bun <module>` reads Bun.serve's
   * options from it): those options, serving `handler` with the limits `serve` gives a listener.
   * Absent where the runtime's own server takes nothing but `fetch` (`deno serve`).
   */
  readonly ownServerOptions?: (handler: FetchHandler, options: ServeOptions) => { fetch: (...args: never[]) => Response | Promise<Response> } & Record<string, unknown>;
  /** A fetch whose connections all go to the given Unix socket, with no body or header timeouts. */
  unixFetch(socketPath: string): typeof fetch;
  /**
   * The fetch for calls to another service (the photo service): it keeps connections alive and
   * sends each request once. Bun's and Deno's own fetch silently send a request again on a new
   * connection when a reused keep-alive connection is reset before the answer, so the other side
   * may see it twice: every runtime calls through undici (undici-fetch.ts), which does not.
   */
  readonly upstreamFetch: typeof fetch;
  /** Starts a process (stdin closed, stdout/stderr piped); rejects if it cannot be started. */
  spawn(command: string, args: string[], options: SpawnOptions): Promise<ChildProcess>;
  /** Runs `fn` once on SIGINT or SIGTERM. */
  onShutdownSignal(fn: (signal: string) => void): void;
  exit(code: number): never;
}

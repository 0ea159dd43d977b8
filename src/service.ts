import type { GuardPolicy } from "./http/guard.ts";
import type { FetchHandler, ListenTarget } from "./runtime/types.ts";

// What the entry point serves: a service's routes, where they listen, who may call, and how the
// service drains and stops. app.ts builds them; each service's wiring returns one.

export type Service = {
  name: string;
  /** The routes, before the guard (in-process tests call it). */
  handler: FetchHandler;
  targets: ListenTarget[];
  /** Who may call, checked on each listener before any route (see src/http/guard.ts). */
  policy: GuardPolicy;
  /** Ends what the service started (the model runner's llama-server runners), after its listeners closed. */
  stop?: () => Promise<void>;
  /**
   * On SIGTERM, before the listeners close: new requests get 503 and readiness fails; resolves once
   * the work in flight ended, or after `graceMs`.
   */
  drain?: (graceMs: number) => Promise<void>;
};

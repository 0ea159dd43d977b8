import type { Config } from "./config.ts";
import { bodyStalled } from "./http/body.ts";
import { overloaded } from "./http/errors.ts";
import type { GuardPolicy } from "./http/guard.ts";
import type { FetchHandler, ListenTarget, ServeOptions } from "./runtime/types.ts";

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

/**
 * A shutdown in its order: the services drain (listeners stay open: a request that still comes gets
 * a 503 it can retry elsewhere), then the listeners close within what is left of the grace, then
 * the services stop what they started.
 */
export async function shutDown(services: Service[], graceMs: number, closeListeners: (graceLeftMs: number) => Promise<unknown> = async () => {}): Promise<void> {
  const deadline = Date.now() + graceMs;
  await Promise.allSettled(services.map((s) => s.drain?.(graceMs)));
  await closeListeners(Math.max(0, deadline - Date.now()));
  await Promise.allSettled(services.map((s) => s.stop?.()));
}

/** How a server of ours serves: the configured limits, and our answers to what they turn away. */
export const serveOptions = (config: Config): ServeOptions => ({ ...config.http, overloaded, stalledBody: bodyStalled });

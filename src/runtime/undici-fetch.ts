import type { Dispatcher } from "undici";
import { callFetch, type Answer, type Call } from "./node-client.ts";
import { undiciSend } from "./undici-send.ts";

/**
 * A fetch through undici's dispatch API (undici-send.ts: less than half the CPU of node:http's
 * client, a third of fetch's, per call on Node), undici loaded when this is made, not with the
 * module: an idle model runner holds none of it (about 11 MiB).
 */
export const undiciFetch = (dispatcher: () => Promise<Dispatcher>): typeof fetch => callFetch(lazyUndiciSend(dispatcher));

/** undici's dispatch on the dispatcher made by `dispatcher`, which is made now, not on the first call. */
export function lazyUndiciSend(dispatcher: () => Promise<Dispatcher>): (call: Call) => Promise<Answer> {
  // Loading starts now, not on the first call: under load it took longer than a call's deadline.
  let loaded: ((call: Call) => Promise<Answer>) | undefined;
  const send = dispatcher().then((made) => (loaded = undiciSend(made)));
  send.catch(() => {}); // a failed load fails each call instead
  // Once loaded, a call goes straight on: an async frame awaiting the load cost each call a promise.
  return (call) => (loaded ? loaded(call) : send.then((ready) => ready(call)));
}

/**
 * The photo service's fetch on every runtime: an undici Agent, which keeps connections alive and
 * never sends a request again when a reused one fails (it fails that call: album-once.test.ts).
 * Bun's and Deno's own fetch and node:http clients do resend, so they went without keep-alive, a
 * TCP connect per call. undici is loaded by its file: Bun answers the bare name `undici` with a
 * stand-in over its own fetch (no dispatch API, the same resends).
 */
export const keepAliveUpstreamFetch = (): typeof fetch => undiciFetch(async () => new (await import("undici/index.js")).Agent());

/**
 * The env names undici reads when it first connects (which HTTP parser to load): Deno, run with an
 * `--allow-env=` list, must allow them too, or every call fails (502 upstream_unreachable).
 */
export const UNDICI_ENV_NAMES = ["JEST_WORKER_ID", "UNDICI_NO_WASM_SIMD"] as const;

import { readFile } from "node:fs/promises";
import type { IRequest } from "itty-router";
import { notFound } from "../http/errors.ts";
import type { ReportError } from "../http/request-errors.ts";
import { LOCAL_CALLER, type Caller } from "../keys/keyring.ts";
import { pushStream } from "../http/stream.ts";
import type { Route } from "../http/router.ts";
import { liveState, type StateDeps } from "./state.ts";

// The status page: `/` for browsers (other clients keep Docker Model Runner's text answer), its
// assets from `assets/` beside this file (no CDN, no build step), and the live-state stream
// `GET /engines/events` that the page and the command both read.

export type WebDeps = StateDeps & {
  /** What `/` answers clients that are not browsers. */
  notBrowser: Route["handle"];
  /** Aborts when the server begins to stop: the events streams end then, or they would hold it up. */
  ending?: AbortSignal;
  /** Where an events stream whose state cannot be read reports it (logged with its request, counted). */
  report?: ReportError;
  /** Whom a request speaks for: the state shows a key its own sessions and tokens (an admin every key's). */
  identify?: (request: Request) => Caller;
};

/** How often the state is looked at for changes; a change is sent once, the same state never twice. */
const STATE_INTERVAL_MS = 500;
/** A comment line now and then keeps proxies and idle timers from closing a quiet stream. */
const PING_INTERVAL_MS = 15_000;

const ASSETS: Record<string, string> = {
  "index.html": "text/html; charset=utf-8",
  "app.js": "text/javascript; charset=utf-8",
  "common.js": "text/javascript; charset=utf-8",
  "loads.js": "text/javascript; charset=utf-8",
  "sessions.js": "text/javascript; charset=utf-8",
  "style.css": "text/css; charset=utf-8",
};

const assetUrl = (name: string) => new URL(`./assets/${name}`, import.meta.url);

/** The page loads nothing but its own files and calls nothing but this server; no one may frame it. */
const PAGE_POLICY = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

async function asset(name: string): Promise<Response> {
  const type = ASSETS[name];
  if (!type) throw notFound();
  // The page's assets are small: read each time, so an edited asset shows on reload.
  const body = await readFile(assetUrl(name));
  const headers: Record<string, string> = { "content-type": type, "cache-control": "no-cache", "x-content-type-options": "nosniff" };
  if (name === "index.html") headers["content-security-policy"] = PAGE_POLICY;
  return new Response(body, { headers });
}

const wantsPage = (request: Request) => (request.headers.get("accept") ?? "").includes("text/html");

/** The last event of a stream whose state could not be read; `id` names the request in the log. */
function failedEvent(id: string | undefined): string {
  const message = `the state could not be read${id ? ` (request ${id}; the server's log tells more)` : ""}`;
  return `event: error\ndata: ${JSON.stringify({ error: { message, type: "server_error", code: "internal_error" } })}\n\n`;
}

/**
 * Server-sent events: `event: state` with the whole state, each time it changes. A state that
 * cannot be read (the store's index) ends the stream with an `error` event: the page reconnects
 * after a while (`retry`).
 */
function events(deps: StateDeps, caller: Caller, until: AbortSignal, failed: (error: unknown) => string): ReadableStream<Uint8Array> {
  let last = "";
  return pushStream(
    (out) => {
      const look = () =>
        liveState(deps, caller).then((state) => {
          const text = JSON.stringify(state);
          if (text === last) return;
          last = text;
          out.send(`event: state\ndata: ${text}\n\n`);
        }, out.fail);
      out.send("retry: 2000\n\n");
      void look();
      const timers = [setInterval(look, STATE_INTERVAL_MS), setInterval(() => out.send(": ping\n\n"), PING_INTERVAL_MS)];
      out.over.addEventListener("abort", () => timers.forEach(clearInterval), { once: true });
    },
    { until, failed },
  );
}

export function webRoutes(deps: WebDeps): Route[] {
  const callerOf = (request: Request) => deps.identify?.(request) ?? LOCAL_CALLER;
  return [
    { method: "GET", path: "/", handle: (request: IRequest) => (wantsPage(request) ? asset("index.html") : deps.notBrowser(request)) },
    { method: "GET", path: "/web/:file", handle: (request: IRequest) => asset(String(request.params.file)) },
    { method: "GET", path: "/engines/state", handle: async (request: IRequest) => Response.json(await liveState(deps, callerOf(request))) },
    {
      method: "GET",
      path: "/engines/events",
      handle: (request: IRequest) => {
        const until = deps.ending ? AbortSignal.any([request.signal, deps.ending]) : request.signal;
        const failed = (error: unknown) => failedEvent(deps.report?.(error, request));
        return new Response(events(deps, callerOf(request), until, failed), {
          headers: { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" },
        });
      },
    },
  ];
}

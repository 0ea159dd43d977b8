import { readFile } from "node:fs/promises";
import type { IRequest } from "itty-router";
import { notFound } from "../http/errors.ts";
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
};

/** How often the state is looked at for changes; a change is sent once, the same state never twice. */
const STATE_INTERVAL_MS = 500;
/** A comment line now and then keeps proxies and idle timers from closing a quiet stream. */
const PING_INTERVAL_MS = 15_000;

const ASSETS: Record<string, string> = {
  "index.html": "text/html; charset=utf-8",
  "app.js": "text/javascript; charset=utf-8",
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

/** Server-sent events: `event: state` with the whole state, each time it changes. */
function events(deps: StateDeps, signal: AbortSignal): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let last = "";
  let timers: ReturnType<typeof setInterval>[] = [];
  const stop = () => timers.forEach(clearInterval);
  return new ReadableStream<Uint8Array>({
    start(controller) {
      const send = (text: string) => {
        try {
          controller.enqueue(encoder.encode(text));
        } catch {
          stop(); // the stream was closed under us
        }
      };
      const look = async () => {
        const text = JSON.stringify(await liveState(deps));
        if (text === last) return;
        last = text;
        send(`event: state\ndata: ${text}\n\n`);
      };
      send("retry: 2000\n\n");
      void look();
      timers = [setInterval(() => void look().catch(() => {}), STATE_INTERVAL_MS), setInterval(() => send(": ping\n\n"), PING_INTERVAL_MS)];
      signal.addEventListener("abort", () => {
        stop();
        try {
          controller.close();
        } catch {
          // already closed
        }
      }, { once: true });
    },
    cancel: stop,
  });
}

export function webRoutes(deps: WebDeps): Route[] {
  return [
    { method: "GET", path: "/", handle: (request: IRequest) => (wantsPage(request) ? asset("index.html") : deps.notBrowser(request)) },
    { method: "GET", path: "/web/:file", handle: (request: IRequest) => asset(String(request.params.file)) },
    { method: "GET", path: "/engines/state", handle: async () => Response.json(await liveState(deps)) },
    {
      method: "GET",
      path: "/engines/events",
      handle: (request: IRequest) =>
        new Response(events(deps, deps.ending ? AbortSignal.any([request.signal, deps.ending]) : request.signal), {
          headers: { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" },
        }),
    },
  ];
}

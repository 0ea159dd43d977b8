import type { FetchHandler } from "../runtime/types.ts";
import { notFound } from "./errors.ts";

// Serving a handler under a path prefix in someone else's app: `/llm/v1/models` reaches the model
// runner as `/v1/models`, so its routes, its guard's open paths and its links stay what they are.

/** `handler` answering under `prefix` (e.g. `/llm`): the prefix is taken off; other paths get 404. */
export function mountAt(prefix: string, handler: FetchHandler): FetchHandler {
  const base = `/${prefix.replace(/^\/+|\/+$/g, "")}`;
  return (request) => {
    const url = new URL(request.url);
    const rest = base === "/" ? url.pathname : within(url.pathname, base);
    if (rest === undefined) return notFound(`no route for ${url.pathname}: this handler is mounted at ${base}`).toResponse();
    url.pathname = rest;
    return handler(moved(request, url));
  };
}

/** The path below `base`, or undefined outside it (`/llmx` is not under `/llm`). */
function within(path: string, base: string): string | undefined {
  if (path === base) return "/";
  return path.startsWith(`${base}/`) ? path.slice(base.length) : undefined;
}

/** The same request at another URL: its body streams through unread, its signal still aborts it. */
function moved(request: Request, url: URL): Request {
  const hasBody = request.method !== "GET" && request.method !== "HEAD" && request.body !== null;
  return new Request(url, {
    method: request.method,
    headers: request.headers,
    signal: request.signal,
    ...(hasBody ? { body: request.body, duplex: "half" } : {}),
  } as RequestInit);
}

import { Router, type IRequest, type RouterType } from "itty-router";
import { methodNotAllowed, notFound, renderError } from "./errors.ts";
import type { ReportError } from "./request-errors.ts";
import type { FetchHandler } from "../runtime/types.ts";

export type Route = {
  method: "GET" | "POST" | "DELETE" | "PUT" | "PATCH";
  path: string;
  handle: (request: IRequest) => Response | Promise<Response>;
};

/**
 * Builds a fetch handler from a route table: unknown paths answer 404, a known path with another
 * method 405 with `Allow`, and every thrown error is rendered once, here, in the OpenAI envelope
 * (one that is not an HttpError, a bug, is given to `report` with its request: see request-errors.ts).
 * Each route is also registered under each of `prefixes` (the model runner's Unix-socket paths
 * carry `/exp/vDD4.40`): cheaper and simpler than rewriting every request's URL.
 *
 * itty-router tries its routes one by one, a regular expression each; with a few hundred routes
 * (every dialect, under two prefixes) that scan was half of our CPU per inference request. So the
 * routes are split by their first literal path segment (after a prefix) into small routers, and a
 * request goes straight to its own: the same matches, in the same order, among a dozen routes.
 */
export function routeTable(routes: Route[], { prefixes = [""], report }: { prefixes?: string[]; report?: ReportError } = {}): FetchHandler {
  const render = (error: unknown, request: Request) => renderError(error, request, report);
  refuseTwice(routes);
  const groups = new Map<string, Route[]>();
  for (const prefix of prefixes) {
    for (const route of routes) {
      const path = prefix + route.path;
      const key = groupKey(path, prefixes);
      if (key === undefined) throw new Error(`route ${route.path}: its first segment must be literal`);
      groups.set(key, [...(groups.get(key) ?? []), { ...route, path }]);
    }
  }
  const routers = new Map([...groups].map(([key, group]) => [key, router(group, render)]));
  const exact = exactRoutes([...routers.values()]);
  const fallback = router([], render);
  return (request) => {
    const handle = exact.get(`${request.method} ${rawPath(request.url)}`);
    if (handle) return answer(handle, request as IRequest, render);
    const key = groupKey(new URL(request.url).pathname, prefixes);
    return ((key !== undefined && routers.get(key)) || fallback).fetch(request);
  };
}

/**
 * Two routes of one method and path: the one listed first answers and the other never does, and
 * which is first depends on how the tables were joined (a list of engine events once took the
 * status page's event stream this way). Refused when the table is built, so the server does not start.
 */
function refuseTwice(routes: Route[]): void {
  const seen = new Set<string>();
  for (const { method, path } of routes) {
    const key = `${method} ${path}`;
    if (seen.has(key)) throw new Error(`route ${key} is listed twice: only the first would ever answer`);
    seen.add(key);
  }
}

/**
 * The routes without parameters or wildcards (the inference endpoints among them), by method and
 * path, each only where it is the route itty would pick (no earlier pattern of its group takes its
 * path): a request for one of those exact paths is answered without a URL parse and a regex scan.
 */
function exactRoutes(routers: RouterType[]): Map<string, Route["handle"]> {
  const exact = new Map<string, Route["handle"]>();
  for (const { routes } of routers) {
    routes.forEach(([method, pattern, handlers, path], i) => {
      if (method === "ALL" || path === undefined || /[:*]/.test(path)) return;
      const earlier = routes.slice(0, i).some(([m, p]) => (m === method || m === "ALL") && p.test(path));
      if (!earlier) exact.set(`${method} ${path}`, handlers[0] as Route["handle"]);
    });
  }
  return exact;
}

/** The path of an absolute URL as the client wrote it (no query, no fragment). */
export function rawPath(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const query = url.indexOf("?", start);
  const fragment = url.indexOf("#", start);
  const end = Math.min(query < 0 ? url.length : query, fragment < 0 ? url.length : fragment);
  return url.slice(start, end);
}

type Render = (error: unknown, request: Request) => Response;

/** One route's answer, its errors rendered as the routers render them. */
function answer(handle: Route["handle"], request: IRequest, render: Render): Response | Promise<Response> {
  request.params = NO_PARAMS;
  try {
    const response = handle(request);
    return response instanceof Promise ? response.catch((error: unknown) => render(error, request)) : response;
  } catch (error) {
    return render(error, request);
  }
}

const NO_PARAMS: IRequest["params"] = Object.freeze({}) as IRequest["params"];

/**
 * The prefix a path starts with (the longest), and its next segment: `/exp/vDD4.40|engines`.
 * Undefined for a route whose segment there is a parameter or a wildcard.
 */
function groupKey(path: string, prefixes: string[]): string | undefined {
  let prefix = "";
  for (const p of prefixes) if (p.length > prefix.length && (path === p || path.startsWith(`${p}/`))) prefix = p;
  const rest = path.slice(prefix.length);
  const segment = rest.split("/", 2)[1] ?? "";
  if (segment.startsWith(":") || segment.includes("*")) return undefined;
  return `${prefix}|${segment}`;
}

function router(routes: Route[], render: Render): RouterType {
  const router: RouterType = Router({ catch: render });
  for (const { method, path, handle } of routes) router[method.toLowerCase() as "get"](path, handle);
  const allowed = new Map<string, Route["method"][]>();
  for (const route of routes) allowed.set(route.path, [...(allowed.get(route.path) ?? []), route.method]);
  for (const [path, methods] of allowed) {
    router.all(path, () => {
      throw methodNotAllowed(methods);
    });
  }
  router.all("*", () => {
    throw notFound();
  });
  return router;
}

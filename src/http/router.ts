import { Router, type IRequest, type RouterType } from "itty-router";
import { methodNotAllowed, notFound, renderError } from "./errors.ts";
import type { FetchHandler } from "../runtime/types.ts";

export type Route = {
  method: "GET" | "POST" | "DELETE" | "PUT" | "PATCH";
  path: string;
  handle: (request: IRequest) => Response | Promise<Response>;
};

/**
 * Builds a fetch handler from a route table: unknown paths answer 404, a known path with another
 * method 405 with `Allow`, and every thrown error is rendered once, here, in the OpenAI envelope.
 * Each route is also registered under each of `prefixes` (the model runner's Unix-socket paths
 * carry `/exp/vDD4.40`): cheaper and simpler than rewriting every request's URL.
 *
 * itty-router tries its routes one by one, a regular expression each; with a few hundred routes
 * (every dialect, under two prefixes) that scan was half of our CPU per inference request. So the
 * routes are split by their first literal path segment (after a prefix) into small routers, and a
 * request goes straight to its own: the same matches, in the same order, among a dozen routes.
 */
export function routeTable(routes: Route[], { prefixes = [""] }: { prefixes?: string[] } = {}): FetchHandler {
  const groups = new Map<string, Route[]>();
  for (const prefix of prefixes) {
    for (const route of routes) {
      const path = prefix + route.path;
      const key = groupKey(path, prefixes);
      if (key === undefined) throw new Error(`route ${route.path}: its first segment must be literal`);
      groups.set(key, [...(groups.get(key) ?? []), { ...route, path }]);
    }
  }
  const routers = new Map([...groups].map(([key, group]) => [key, router(group)]));
  const fallback = router([]);
  return (request) => {
    const key = groupKey(new URL(request.url).pathname, prefixes);
    return ((key !== undefined && routers.get(key)) || fallback).fetch(request);
  };
}

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

function router(routes: Route[]): RouterType {
  const router: RouterType = Router({ catch: renderError });
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

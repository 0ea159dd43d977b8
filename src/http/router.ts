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
 */
export function routeTable(routes: Route[], { prefixes = [""] }: { prefixes?: string[] } = {}): FetchHandler {
  const router: RouterType = Router({ catch: renderError });
  const prefixed = prefixes.flatMap((prefix) => routes.map((r) => ({ ...r, path: prefix + r.path })));
  for (const { method, path, handle } of prefixed) router[method.toLowerCase() as "get"](path, handle);
  const allowed = new Map<string, Route["method"][]>();
  for (const route of prefixed) allowed.set(route.path, [...(allowed.get(route.path) ?? []), route.method]);
  for (const [path, methods] of allowed) {
    router.all(path, () => {
      throw methodNotAllowed(methods);
    });
  }
  router.all("*", () => {
    throw notFound();
  });
  return (request) => router.fetch(request);
}

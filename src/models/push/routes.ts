import type { IRequest } from "itty-router";
import * as z from "zod";
import { parseJson, readBody, validBody } from "../../http/body.ts";
import type { Route } from "../../http/router.ts";
import { referenceParam } from "../lookup.ts";
import type { RegistryOptions } from "../registry/client.ts";
import type { ModelStore } from "../store/store.ts";
import { planPush, runPush, type PushEvent } from "./push.ts";

// `POST /models/{name}/push`: refusals before the push starts get their status (400 a bad name,
// 404 an unknown model, 401/403 the registry's no); then the progress streams as NDJSON lines,
// and a failure meanwhile is an `error` line. A client that leaves stops the push.

export type PushRouteDeps = { store: ModelStore; registry: RegistryOptions };

const PushBody = z.object({ "bearer-token": z.string().min(1).optional() });

/** The body is optional (DMR's CLI sends none): a token is all it may carry. */
async function tokenOf(request: Request): Promise<string | undefined> {
  const bytes = await readBody(request, 64 * 1024);
  if (new TextDecoder().decode(bytes).trim() === "") return undefined;
  return validBody(PushBody, parseJson(bytes))["bearer-token"];
}

export function pushRoute(deps: PushRouteDeps): Route {
  async function push(request: IRequest): Promise<Response> {
    const name = referenceParam(request);
    const token = await tokenOf(request);
    const stop = new AbortController();
    const signal = AbortSignal.any([request.signal, stop.signal]);
    const plan = await planPush(deps.store, name, deps.registry, token, signal);
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        const emit = (event: PushEvent) => {
          if (!signal.aborted) controller.enqueue(encoder.encode(`${JSON.stringify(event)}\n`));
        };
        void runPush(plan, emit, signal)
          .catch((error: Error) => emit({ type: "error", message: error.message, mode: "push" }))
          .finally(() => {
            if (!signal.aborted) controller.close();
          });
      },
      cancel: () => stop.abort(new Error("the client went away")),
    });
    return new Response(body, { headers: { "content-type": "application/x-ndjson", "cache-control": "no-cache" } });
  }
  return { method: "POST", path: "/models/:reference+/push", handle: push };
}

import type { PartSettings } from "./store/parts.ts";
import type { IRequest } from "itty-router";
import * as z from "zod";
import { readJson } from "../http/body.ts";
import { badRequest } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import { conflict, modelNotFound } from "./errors.ts";
import { referenceParam, resolveOr404 } from "./lookup.ts";
import { planHubPull } from "./huggingface/plan.ts";
import type { HubOptions } from "./huggingface/hub.ts";
import { createPuller, type PullJob, type PullStatus } from "./pull/puller.ts";
import { progressStream } from "./pull/stream.ts";
import { HUGGING_FACE, idPrefix, parseReference } from "./reference.ts";
import type { RegistryOptions } from "./registry/client.ts";
import { planRegistryPull } from "./registry/plan.ts";
import { pushRoute } from "./push/routes.ts";
import { loadRoute } from "./package/routes.ts";
import { purgeRoute, type AlsoPurge } from "./purge/routes.ts";
import type { ModelStore, StoredModel } from "./store/store.ts";

// The model-management API: pull (`POST /models/create`, streaming NDJSON progress), list,
// inspect, delete and tag. Handlers take everything they use from `deps`.

export type ModelRoutesDeps = {
  store: ModelStore;
  registry: RegistryOptions;
  hub: HubOptions;
  /** Wraps a model's deletion: the scheduler unloads its runners and launches none until `remove` settles. */
  whileDeleting?: <T>(model: StoredModel, remove: () => Promise<T>) => Promise<T>;
  /** What a purge frees beyond the models (see purge/routes.ts). */
  alsoPurge?: AlsoPurge;
  /** Pulls that may run at once; the others wait their turn (default 2). */
  maxConcurrentPulls?: number;
  /** How large blobs are split into parallel ranged parts (default: 8 streams, parts of 16 MiB at least). */
  pullParts?: PartSettings;
};

const CreateBody = z.object({ from: z.string().min(1), "bearer-token": z.string().min(1).optional() });

/** A create body names a model and maybe a token: 64 KiB is far more than it needs. */
const CREATE_BODY_LIMIT = 64 * 1024;

export const publicModel = (m: StoredModel) => ({ id: m.id, tags: m.tags, created: m.created, config: m.config });

/** Which tags a delete removes: the named tag, or every tag when the model is named by id. */
function tagsToRemove(store: ModelStore, model: StoredModel, reference: string): string | undefined {
  const id = idPrefix(reference);
  if (id && model.id.startsWith(id)) return undefined;
  const { key } = parseReference(reference, store.referenceOptions);
  return model.tags.includes(key) ? key : undefined;
}

export type ModelApi = {
  routes: Route[];
  /**
   * Starts (or joins) the pull of `from`; `signal` is the caller's presence, as for a client of
   * `/models/create` (the last one gone cancels the pull). For the other dialects' pull routes.
   */
  pull(from: string, signal: AbortSignal, token?: string): Promise<PullJob>;
  /** Deletes a tag, or the model when named by id or by its last tag (409 for an id with several tags unless `force`). */
  remove(reference: string, force: boolean): Promise<Removed>;
  /** The pulls running or waiting their turn now (the status page shows them). */
  pulls(): PullStatus[];
};

type Removed = { untagged: string[]; deleted: string | undefined };

export const modelRoutes = (deps: ModelRoutesDeps): Route[] => createModelApi(deps).routes;

export function createModelApi(deps: ModelRoutesDeps): ModelApi {
  const { store } = deps;
  const puller = createPuller(store, { maxConcurrent: deps.maxConcurrentPulls, parts: deps.pullParts });

  function pull(from: string, signal: AbortSignal, token?: string): Promise<PullJob> {
    const reference = parseReference(from, store.referenceOptions);
    return puller.start(
      reference.key,
      (signal) =>
        reference.registry === HUGGING_FACE
          ? planHubPull(store, reference, { ...deps.hub, ...(token ? { token } : {}) }, signal)
          : planRegistryPull(store, reference, deps.registry, token, signal),
      signal,
    );
  }

  async function create(request: IRequest): Promise<Response> {
    const body = await readJson(request, CREATE_BODY_LIMIT, CreateBody);
    const job = await pull(body.from, request.signal, body["bearer-token"]);
    return new Response(progressStream(job, request.signal), {
      headers: { "content-type": "application/x-ndjson", "cache-control": "no-cache" },
    });
  }

  async function remove(request: IRequest): Promise<Response> {
    const force = new URL(request.url).searchParams.get("force") === "true";
    const { untagged, deleted } = await removeModel(referenceParam(request), force);
    return Response.json([...untagged.map((t) => ({ Untagged: t })), ...(deleted ? [{ Deleted: deleted }] : [])]);
  }

  async function removeModel(reference: string, force: boolean): Promise<Removed> {
    const model = await resolveOr404(store, reference);
    const tag = tagsToRemove(store, model, reference);
    if (tag === undefined && model.tags.length > 1 && !force) {
      throw conflict(`model ${model.id} has several tags (${model.tags.join(", ")}): delete a tag, or add ?force=true`);
    }
    const deletes = tag === undefined || model.tags.length === 1;
    const removal = () => store.remove(model.id, tag);
    const { untagged, deleted } = await (deletes && deps.whileDeleting ? deps.whileDeleting(model, removal) : removal());
    if (untagged.length === 0 && !deleted) throw modelNotFound(reference);
    return { untagged, deleted };
  }

  async function tag(request: IRequest): Promise<Response> {
    const query = new URL(request.url).searchParams;
    const repo = query.get("repo");
    if (!repo) throw badRequest("missing_repo", "the query parameter repo is required");
    const model = await resolveOr404(store, referenceParam(request));
    const target = parseReference(`${repo}:${query.get("tag") || "latest"}`, store.referenceOptions);
    await store.addTag(model.id, target.key);
    return Response.json({ message: `Model tagged successfully with ${target.key}` }, { status: 201 });
  }

  const routes: Route[] = [
    { method: "POST", path: "/models/create", handle: create },
    loadRoute(store),
    { method: "GET", path: "/models", handle: async () => Response.json((await store.list()).map(publicModel)) },
    { method: "POST", path: "/models/:reference+/tag", handle: tag },
    pushRoute({ store, registry: deps.registry }),
    { method: "GET", path: "/models/:reference+", handle: async (r) => Response.json(publicModel(await resolveOr404(store, referenceParam(r)))) },
    purgeRoute(store, (model) => (deps.whileDeleting ?? ((_, remove) => remove()))(model, () => store.remove(model.id, undefined)), deps.alsoPurge),
    { method: "DELETE", path: "/models/:reference+", handle: remove },
  ];
  return { routes, pull, remove: removeModel, pulls: () => puller.active() };
}

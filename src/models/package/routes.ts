import type { IRequest } from "itty-router";
import { badRequest } from "../../http/errors.ts";
import type { Route } from "../../http/router.ts";
import { parseReference } from "../reference.ts";
import type { ModelStore } from "../store/store.ts";
import { loadArchive } from "./load.ts";

// `POST /models/load`: a model archive (see load.ts) in the body, as Docker Model Runner's
// `docker model package` sends one; `?tag=` (ours) records it under that name at once, where DMR's
// client tags it with a second call (`POST /models/{id}/tag`). The answer comes once the whole
// archive is in: the model, as `GET /models/{name}` shows it.

export function loadRoute(store: ModelStore): Route {
  async function load(request: IRequest): Promise<Response> {
    const tagParam = new URL(request.url).searchParams.get("tag");
    const tag = tagParam ? parseReference(tagParam, store.referenceOptions).key : undefined;
    if (!request.body) throw badRequest("missing_archive", "the body must be a model archive (a tar of blobs/sha256/<hex> files and manifest.json)");
    const model = await loadArchive(store, request.body, tag, request.signal);
    const { id, tags, created, config } = model;
    return Response.json({ type: "success", message: "Model loaded successfully", id, tags, created, config });
  }
  return { method: "POST", path: "/models/load", handle: load };
}

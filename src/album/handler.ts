import { badRequest, HttpError, renderError } from "../http/errors.ts";
import { rawPath, routeTable } from "../http/router.ts";
import type { FetchHandler } from "../runtime/types.ts";
import { exactInteger, INT64_TEXT, int64Param } from "./int64.ts";
import { deadline } from "./deadline.ts";
import { callFailure, parsePhotos, photosText, refusal, requestPhotos, type Photo, type PhotoServiceDeps } from "./photos.ts";

export type AlbumDeps = PhotoServiceDeps;

const ALBUMS = "/api/albums/";

/** The album service: `GET /api/albums/{albumId}` wraps the photo service's photos of that album. */
export function createAlbumHandler(deps: AlbumDeps): FetchHandler {
  const routes = routeTable([
    {
      method: "GET",
      // Optional so that an empty id reaches us and gets a 400 rather than a 404.
      path: "/api/albums/:albumId?",
      handle: (request) => album(deps, String(request.params.albumId ?? ""), request.signal),
    },
  ]);
  return (request) => {
    // Nearly every request is `GET /api/albums/<digits>`: taken as it is, without the route
    // table's URL parse and pattern; anything else (other paths, methods, trailing slashes,
    // escapes) is the route table's, with its 404 and 405.
    const path = request.method === "GET" ? rawPath(request.url) : "";
    const id = path.startsWith(ALBUMS) ? path.slice(ALBUMS.length) : "";
    if (!INT64_TEXT.test(id)) return routes(request);
    return album(deps, id, request.signal);
  };
}

/** The answer for one album; never throws (one promise per request, no `catch` layered on it). */
async function album(deps: AlbumDeps, idParam: string, clientSignal: AbortSignal): Promise<Response> {
  const albumId = int64Param(idParam);
  if (albumId === undefined) return renderError(badRequest("invalid_album_id", "albumId must be a 64-bit integer"));
  // One async frame for the whole call: a nested one for the photo service cost 1.6–4.6 µs of CPU
  // per album under bench:album (promise hand-offs on every request).
  const call = deadline(clientSignal, deps.timeoutMs, deps.clock);
  try {
    const response = await requestPhotos(deps, albumId, call.signal);
    if (response.status >= 300) return await refusal(response);
    return albumResponse(albumId, parsePhotos(await photosText(response, deps.maxBytes)));
  } catch (error) {
    return renderError(error instanceof HttpError ? error : callFailure(error, call, clientSignal, deps.timeoutMs));
  } finally {
    call.finish();
  }
}

/**
 * The album as JSON: photo ids serialise exactly (see int64.ts), and albumId is canonical decimal
 * text, a number where that is exact; the schema fixed the photos' fields and their order.
 */
function albumResponse(albumId: string, photos: Photo[]): Response {
  const id = Number(albumId);
  return Response.json({ albumId: Number.isSafeInteger(id) ? id : exactInteger(albumId), photos });
}

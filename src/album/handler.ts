import { badRequest } from "../http/errors.ts";
import { routeTable } from "../http/router.ts";
import type { FetchHandler } from "../runtime/types.ts";
import { int64Param } from "./int64.ts";
import { fetchAlbumPhotos, UpstreamStatus, type Photo, type PhotoServiceDeps } from "./photos.ts";

export type AlbumDeps = PhotoServiceDeps;

/** The album service: `GET /api/albums/{albumId}` wraps the photo service's photos of that album. */
export function createAlbumHandler(deps: AlbumDeps): FetchHandler {
  return routeTable([
    {
      method: "GET",
      // Optional so that an empty id reaches us and gets a 400 rather than a 404.
      path: "/api/albums/:albumId?",
      async handle(request) {
        const albumId = int64Param(String(request.params.albumId ?? ""));
        if (albumId === undefined) throw badRequest("invalid_album_id", "albumId must be a 64-bit integer");
        try {
          const photos = await fetchAlbumPhotos(deps, albumId, request.signal);
          return new Response(albumJson(albumId, photos), {
            headers: { "content-type": "application/json" },
          });
        } catch (error) {
          if (error instanceof UpstreamStatus) return new Response(null, { status: error.status });
          throw error;
        }
      },
    },
  ]);
}

// albumId is canonical decimal text already, and photo ids serialise exactly (see int64.ts); the
// schema fixed the photos' fields and their order.
function albumJson(albumId: string, photos: Photo[]): string {
  return `{"albumId":${albumId},"photos":${JSON.stringify(photos)}}`;
}

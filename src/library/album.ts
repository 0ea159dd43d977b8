import { openService, type LibraryService, type ServiceOptions } from "./open.ts";

// `llamadock/album`: the album service as a handler to mount or serve.

export type { LibraryService, ServiceOptions, Settings } from "./open.ts";

/**
 * The album service: `GET /api/albums/{albumId}` fetches the album's photos from the photo service
 * and wraps them (docs/api.md). Nothing is read, opened or started until it is called; it then reads
 * only what `options` gives it, and opens no listener: serve or mount `fetch`.
 *
 * Settings it reads (docs/configuration.md): `PHOTOS_API_BASE_URL`, `PHOTOS_API_TIMEOUT_MS`,
 * `PHOTOS_API_MAX_BYTES`; for its guard `ALBUM_HOST` (a loopback name: only loopback Host headers
 * and `ALLOWED_HOSTS`), `ALLOWED_HOSTS`, `ALLOWED_ORIGINS`. It takes no API key.
 *
 * @param options.settings settings by name (unknown names are refused)
 * @param options.env an environment read as the server reads it, e.g. `process.env`
 * @returns `fetch` (guarded), `handler` (unguarded); `drain` and `stop` do nothing (it holds nothing)
 * @throws ConfigError when a setting is invalid
 */
export function createAlbumService(options: ServiceOptions = {}): Promise<LibraryService> {
  return openService("album", options);
}

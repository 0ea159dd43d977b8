import { afterAll, afterEach, beforeAll } from "vitest";
import { createAlbumHandler, type AlbumDeps } from "../../src/album/handler.ts";
import { albumOf, startPhotoService, type PhotoService } from "./photo-service.ts";

// What every album unit test needs: one loopback photo service for the file, reset to a normal
// answer and an empty request log before each test, and a handler in front of it.

export function usePhotoService(): { readonly upstream: PhotoService } {
  const holder = {} as { upstream: PhotoService };
  beforeAll(async () => {
    holder.upstream = await startPhotoService();
  });
  afterEach(() => {
    holder.upstream.requests.length = 0;
    holder.upstream.answerWith(albumOf(3));
  });
  afterAll(() => holder.upstream.close());
  return holder;
}

export function album(deps: Partial<AlbumDeps> & { baseUrl: string }) {
  const handler = createAlbumHandler({ fetch: globalThis.fetch, timeoutMs: 5_000, ...deps });
  return (path: string, init?: RequestInit) => Promise.resolve(handler(new Request(`http://album.test${path}`, init)));
}

/** Parses JSON keeping every number as its exact source text, so 64-bit ids can be compared. */
export function parseExact(text: string): unknown {
  return JSON.parse(text, (_key, value, context?: { source?: string }) =>
    typeof value === "number" ? context?.source : value,
  );
}

export type ErrorBody = { error: { message: string; type: string; code: string } };

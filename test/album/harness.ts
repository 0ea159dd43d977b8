import { afterAll, afterEach, beforeAll } from "vitest";
import { systemClock } from "../../src/http/clock.ts";
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
  const handler = createAlbumHandler({ fetch: globalThis.fetch, timeoutMs: 5_000, maxBytes: 4 << 20, clock: systemClock, ...deps });
  return (path: string, init?: RequestInit) => Promise.resolve(handler(new Request(`http://album.test${path}`, init)));
}

/** A clock that moves only when the test says: due timers fire on `advance`, earliest first. */
export function manualClock() {
  let now = 0;
  const timers = new Set<{ at: number; fire: () => void }>();
  return {
    after(ms: number, fire: () => void) {
      const timer = { at: now + ms, fire };
      timers.add(timer);
      return () => void timers.delete(timer);
    },
    advance(ms: number) {
      now += ms;
      const due = [...timers].filter((t) => t.at <= now).sort((a, b) => a.at - b.at);
      for (const timer of due) {
        timers.delete(timer);
        timer.fire();
      }
    },
    get pending() {
      return timers.size;
    },
  };
}

/** Parses JSON keeping every number as its exact source text, so 64-bit ids can be compared. */
export function parseExact(text: string): unknown {
  return JSON.parse(text, (_key, value, context?: { source?: string }) =>
    typeof value === "number" ? context?.source : value,
  );
}

export type ErrorBody = { error: { message: string; type: string; code: string } };

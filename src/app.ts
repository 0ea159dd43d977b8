import { createAlbumHandler } from "./album/handler.ts";
import type { Config } from "./config.ts";
import type { FetchHandler, ListenTarget, Runtime } from "./runtime/types.ts";

// The single place where dependencies are wired: config and runtime in, services out.
// No runtime imports here; `index.ts` chooses the runtime.

export type Service = { name: string; handler: FetchHandler; targets: ListenTarget[] };

export function buildServices(config: Config, runtime: Runtime): Service[] {
  void runtime; // the model runner will use it (Unix-socket fetch, spawning)
  const services: Service[] = [];
  if (config.services.includes("album")) {
    services.push({
      name: "album",
      handler: createAlbumHandler({
        fetch: globalThis.fetch.bind(globalThis),
        baseUrl: config.album.photosBaseUrl,
        timeoutMs: config.album.photosTimeoutMs,
      }),
      targets: [{ kind: "tcp", hostname: config.album.host, port: config.album.port }],
    });
  }
  return services;
}

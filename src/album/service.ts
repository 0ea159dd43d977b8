import type { Config } from "../config.ts";
import type { Runtime } from "../runtime/types.ts";
import type { Service } from "../service.ts";
import { systemClock } from "../http/clock.ts";
import { createAlbumHandler } from "./handler.ts";

// The album service's wiring: its handler over the runtime's upstream fetch, where it listens,
// and who may call.

export function albumService(config: Config, runtime: Runtime): Service {
  return {
    name: "album",
    handler: createAlbumHandler({
      fetch: runtime.upstreamFetch,
      baseUrl: config.album.photosBaseUrl,
      timeoutMs: config.album.photosTimeoutMs,
      maxBytes: config.album.photosMaxBytes,
      clock: systemClock,
    }),
    // Host and Origin checks as for the model runner; its contract has no API key.
    policy: { ...config.security, apiKeys: [] },
    targets: [
      { kind: "tcp", hostname: config.album.host, port: config.album.port },
      ...(config.album.socketPath ? [{ kind: "unix" as const, path: config.album.socketPath }] : []),
    ],
  };
}

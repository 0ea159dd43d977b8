import { systemClock } from "./album/deadline.ts";
import { createAlbumHandler } from "./album/handler.ts";
import type { Config } from "./config.ts";
import type { Runtime } from "./runtime/types.ts";
import type { Service } from "./service.ts";

// The single place where dependencies are wired: config and runtime in, services out.
// No runtime imports here; `index.ts` chooses the runtime.

export type { Service };

export async function buildServices(config: Config, runtime: Runtime): Promise<Service[]> {
  const services: Service[] = [];
  if (config.services.includes("album")) {
    services.push({
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
    });
  }
  if (config.services.includes("runner")) {
    // Loaded on demand: an album-only process then holds none of the runner's code (code a process
    // loads but never calls still slowed its requests under bench:album; see the README).
    const { modelRunner } = await import("./model-runner.ts");
    services.push(modelRunner(config, runtime));
  }
  return services;
}

import { albumService } from "./album/service.ts";
import type { Config } from "./config.ts";
import type { Runtime } from "./runtime/types.ts";
import type { Service } from "./service.ts";

// The single place where dependencies are wired: config and runtime in, services out. The server
// (src/index.ts) and the library's entries (src/library/) both build their services here.
// No runtime imports here; the caller chooses the runtime.

export type { Service };

export async function buildServices(config: Config, runtime: Runtime): Promise<Service[]> {
  const services: Service[] = [];
  if (config.services.includes("album")) services.push(albumService(config, runtime));
  if (config.services.includes("runner")) {
    // Loaded on demand: an album-only process then holds none of the runner's code (code a process
    // loads but never calls still slowed its requests under bench:album; see the README).
    const { modelRunner } = await import("./model-runner.ts");
    services.push(modelRunner(config, runtime));
  }
  return services;
}

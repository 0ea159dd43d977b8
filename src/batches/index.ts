import { join } from "node:path";
import type { InferenceDeps } from "../inference/routes.ts";
import type { Caller } from "../keys/keyring.ts";
import { createBatches } from "./batches.ts";
import { createFileStore } from "./files.ts";
import type { FileLimits } from "./quota.ts";
import { batchRoutes } from "./routes.ts";
import { lineRunner } from "./run.ts";

// Batches wired: files and batches kept under one folder, lines run through inference (the
// batches a previous run left unfinished resume at start).

export function openBatches(dir: string, limits: FileLimits, deps: InferenceDeps, identify: (request: Request) => Caller) {
  const files = createFileStore(join(dir, "files"));
  const batches = createBatches(join(dir, "batches"), files, lineRunner(deps));
  return { routes: batchRoutes(files, batches, limits, identify), stop: (graceMs: number) => batches.stop(graceMs) };
}

import { join } from "node:path";
import type { InferenceDeps } from "../inference/routes.ts";
import type { Caller } from "../keys/keyring.ts";
import { createBatches, type BatchLimits } from "./batches.ts";
import { createFileStore } from "./files.ts";
import { createQuota, type FileLimits } from "./quota.ts";
import { batchRoutes } from "./routes.ts";
import { lineRunner } from "./run.ts";

// Batches wired: files and batches kept under one folder, on each key's quota, lines run through
// inference (the batches a previous run left unfinished resume at start).

export function openBatches(settings: { path: string } & Omit<BatchLimits, "maxLineBytes">, fileLimits: FileLimits, deps: InferenceDeps, identify: (request: Request) => Caller) {
  const { path: dir, ...limits } = settings;
  const files = createFileStore(join(dir, "files"));
  const quota = createQuota(files, fileLimits);
  // An input line is one request's body: longer than the body limit, it could not be sent anyway.
  const batches = createBatches(join(dir, "batches"), files, lineRunner(deps), { ...limits, maxLineBytes: deps.bodyLimit }, quota);
  const routes = batchRoutes({ files, batches, quota, limits: fileLimits, identify, ...(deps.limiter ? { limiter: deps.limiter } : {}) });
  return { routes, stop: (graceMs: number) => batches.stop(graceMs) };
}

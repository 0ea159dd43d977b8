import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { routeTable } from "../../src/http/router.ts";
import { createModelStore, modelRoutes, type ModelStore } from "../../src/models/index.ts";
import type { StoreOptions } from "../../src/models/store/store.ts";
import type { Credentials } from "../../src/models/registry/auth.ts";
import type { FetchHandler } from "../../src/runtime/types.ts";

// The model routes built in-process over a store in a temporary folder, talking to real
// registries and fake Hubs over loopback HTTP.

export type ModelApi = { store: ModelStore; handler: FetchHandler; root: string; dispose(): Promise<void> };

export type ApiOptions = {
  defaultRegistry?: string;
  credentials?: Record<string, Credentials>;
  hfEndpoint?: string;
  hfToken?: string;
  whileDeleting?: Parameters<typeof modelRoutes>[0]["whileDeleting"];
  maxConcurrentPulls?: number;
  /** How long a registry or the Hub may send nothing (the default, 30 s, is too long for tests). */
  stallTimeoutMs?: number;
  freeSpace?: StoreOptions["freeSpace"];
  /** How large blobs are split into ranged parts (default: the server's). */
  pullParts?: Parameters<typeof modelRoutes>[0]["pullParts"];
  /** The store's folder (default: a new temporary one, removed by `dispose`). */
  root?: string;
};

export async function modelApi(options: ApiOptions = {}): Promise<ModelApi> {
  const root = options.root ?? (await mkdtemp(join(tmpdir(), "llamadock-models-")));
  const store = createModelStore(
    root,
    options.defaultRegistry ? { defaultRegistry: options.defaultRegistry } : {},
    options.freeSpace ? { freeSpace: options.freeSpace } : {},
  );
  const fetch = globalThis.fetch.bind(globalThis);
  const stall = options.stallTimeoutMs ? { stallTimeoutMs: options.stallTimeoutMs } : {};
  const routes = modelRoutes({
    store,
    registry: { fetch, insecureHosts: [], credentials: options.credentials ?? {}, ...stall },
    hub: { fetch, endpoint: options.hfEndpoint ?? "http://127.0.0.1:9", ...(options.hfToken ? { token: options.hfToken } : {}), ...stall },
    ...(options.whileDeleting ? { whileDeleting: options.whileDeleting } : {}),
    ...(options.maxConcurrentPulls ? { maxConcurrentPulls: options.maxConcurrentPulls } : {}),
    ...(options.pullParts ? { pullParts: options.pullParts } : {}),
  });
  const handler = routeTable(routes, { prefixes: ["", "/exp/vDD4.40"] });
  const dispose = async () => {
    if (!options.root) await rm(root, { recursive: true, force: true });
  };
  return { store, handler, root, dispose };
}

export type PullLine = { type: string; message: string; total?: number; layer?: { id: string; size: number; current: number }; mode: string };

export async function pull(
  handler: FetchHandler,
  body: Record<string, unknown>,
  signal?: AbortSignal,
): Promise<{ status: number; lines: PullLine[]; json?: any }> {
  const response = await handler(
    new Request("http://model-runner/models/create", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      ...(signal ? { signal } : {}),
    }),
  );
  if (response.headers.get("content-type")?.includes("ndjson")) {
    const text = await response.text();
    return { status: response.status, lines: text.split("\n").filter(Boolean).map((line) => JSON.parse(line) as PullLine) };
  }
  return { status: response.status, lines: [], json: await response.json() };
}

export async function call(handler: FetchHandler, method: string, path: string): Promise<{ status: number; json: any }> {
  const response = await handler(new Request(`http://model-runner${path}`, { method }));
  return { status: response.status, json: await response.json() };
}

// Model management: references, the store, pulls (OCI registries, Hugging Face) and the /models API.

export { createModelStore, type ModelConfig, type ModelStore, type StoredModel } from "./store/store.ts";
export { createModelApi, modelRoutes, publicModel, type ModelApi, type ModelRoutesDeps } from "./routes.ts";
export { parseReference, type ModelReference } from "./reference.ts";
export type { RegistryOptions } from "./registry/client.ts";
export type { HubOptions } from "./huggingface/hub.ts";
export type { PullStatus } from "./pull/puller.ts";
export { progressStream, type ProgressShape } from "./pull/stream.ts";

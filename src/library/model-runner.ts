import { openService, type LibraryService, type ServiceOptions } from "./open.ts";

// `llamadock/model-runner`: the model runner as a handler to mount or serve, with its drain and stop.

export type { LibraryService, ServiceOptions, Settings } from "./open.ts";

/**
 * The model runner: Docker Model Runner's HTTP interface, OpenAI, Anthropic and Ollama dialects,
 * Files and Batches, over the model store and llama-server runners it starts on demand
 * (docs/api.md). Nothing is read, opened or started until it is called. Called, it opens the model
 * store (`MODELS_PATH`) and the state kept beside `INFERENCE_SETTINGS_PATH` (usage, batches),
 * loads pinned models, and opens no listener: serve or mount `fetch`. Runners start as requests
 * need them.
 *
 * Every setting of docs/configuration.md applies but those of listeners and the album
 * (`RUNNER_SOCKET`, `RUNNER_PORT`, the `HTTP_*` limits: the server you mount it in has its own).
 * `RUNNER_HOST` still decides the guard's Host check; `API_KEYS` or `API_KEYS_FILE` the keys asked.
 *
 * @param options.settings settings by name (unknown names are refused)
 * @param options.env an environment read as the server reads it, e.g. `process.env`
 * @returns `fetch` (guarded), `handler` (unguarded), `drain(graceMs)` (new requests get 503, resolves
 *   when the work in flight ended or after `graceMs`) and `stop()` (ends the runners, closes the store)
 * @throws ConfigError when a setting is invalid
 */
export function createModelRunner(options: ServiceOptions = {}): Promise<LibraryService> {
  return openService("runner", options);
}

import type { IRequest } from "itty-router";
import { clientGone, HttpError, notFound } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import { modelNotFound } from "../models/errors.ts";
import { decisionMethod, systemOneMethod } from "../models/decisions.ts";
import { referenceParam, resolveOr404, SERVING_LOOK_MS } from "../models/lookup.ts";
import type { ModelStore, StoredModel } from "../models/index.ts";
import type { Lease } from "../scheduler/runner.ts";
import type { Scheduler } from "../scheduler/scheduler.ts";
import type { Lane } from "../scheduler/types.ts";
import { encodeJson, readBody, parseJson, withLeadingField } from "../http/body.ts";
import { policeBody, refuseUnreadableMedia, type BodyPolicy } from "./body-policy.ts";
import type { MediaInliner } from "./media/fetch.ts";
import { forward, type ErrorEvent, type Reshape } from "./forward.ts";
import { boundTokens, tokenFieldAdded, type Bounds } from "./bounds.ts";
import type { InferenceMetrics } from "./metrics.ts";
import { ENDPOINTS, OPENAI_ENDPOINTS, requestedModel, type Endpoint } from "./requests.ts";
import { structuredRequest } from "./structured.ts";
import { LOCAL_CALLER, type Caller } from "../keys/keyring.ts";
import type { Limiter } from "../keys/limits.ts";
import { bothTimers, type Meter, type Ticket } from "./usage/meter.ts";
import type { RequestTimer } from "./latency.ts";
import { openingOf, prefixOf, sessionOf } from "./session.ts";

// The OpenAI-compatible engine endpoints, under every base path clients use: DMR's
// `/engines/llama.cpp/v1`, the same without the engine segment, and plain `/v1`.

export type InferenceDeps = {
  store: Pick<ModelStore, "resolve" | "list">;
  scheduler: Scheduler;
  metrics: InferenceMetrics;
  /** Largest request body accepted, in bytes. */
  bodyLimit: number;
  /** What a body may ask of llama-server. */
  bodyPolicy: BodyPolicy;
  /** What one request may take of a shared runner. */
  bounds: Bounds;
  /** Fetches the remote media a body may carry (when allowed) into the body, as data: URLs. */
  inlineMedia?: MediaInliner;
  /** Whether the model is served here (a replica with pinned models refuses the others); default all. */
  admits?: (modelId: string) => boolean;
  /** Whom a request speaks for (see src/keys/keyring.ts); default: everyone is `local`. */
  identify?: (request: Request) => Caller;
  /** Counts each request for its key and model, and holds it to the key's limits. */
  meter?: Meter;
  /** The keys' request limits alone (the meter's), for a request of a key that is not inference: a batch's creation. */
  limiter?: Limiter;
  /** Each request's key is named to its runner, which reuses caches per key (src/slot-cache/per-key.ts). */
  promptsPerKey?: boolean;
  /** Agent sessions' requests are placed on their runner's slots (src/scheduler/affinity.ts). */
  sessionAffinity?: boolean;
};

export const ENGINE = "llama.cpp";
const BASES = [`/engines/${ENGINE}/v1`, "/engines/v1", "/v1"];

/** A model as OpenAI lists it, with which way it answers decisions (see src/models/decisions.ts). */
const openAiModel = (m: StoredModel) => {
  const decisions = decisionMethod(m);
  return { id: m.tags[0] ?? m.id, object: "model", created: m.created, owned_by: "docker", ...(decisions ? { capabilities: { decisions, systemone: systemOneMethod(m) } } : {}) };
};

export function inferenceRoutes(deps: InferenceDeps): Route[] {
  const listModels = async () => Response.json({ object: "list", data: (await deps.store.list()).map(openAiModel) });
  const getModel = async (request: IRequest) => {
    return Response.json(openAiModel(await resolveOr404(deps.store, referenceParam(request))));
  };
  const routes = BASES.flatMap((base): Route[] => [
    { method: "GET", path: `${base}/models`, handle: listModels },
    { method: "GET", path: `${base}/models/:reference+`, handle: getModel },
    ...OPENAI_ENDPOINTS.map((endpoint): Route => ({
      method: "POST",
      path: `${base}/${endpoint}`,
      handle: (request) => counted(deps.metrics, endpoint, () => infer(deps, endpoint, request)),
    })),
  ]);
  // llama-server's own token counting, at its own paths (no /v1), as clients that count tokens call it.
  for (const endpoint of ["tokenize", "detokenize"] as const) {
    routes.push({ method: "POST", path: `/${endpoint}`, handle: (request) => counted(deps.metrics, endpoint, () => infer(deps, endpoint, request)) });
  }
  // After the real ones, so only another engine's paths reach it.
  const unknownEngine = (request: IRequest) => {
    const engine = String(request.params.engine);
    throw engine === ENGINE ? notFound() : notFound(`unknown engine: ${engine} (this runner has ${ENGINE})`);
  };
  routes.push(
    { method: "GET", path: "/engines/:engine/v1/*", handle: unknownEngine },
    { method: "POST", path: "/engines/:engine/v1/*", handle: unknownEngine },
  );
  return routes;
}

/** Endpoints that generate or embed: timed for the latency histograms (token counting is not). */
const TIMED = new Set<Endpoint>(["chat/completions", "completions", "embeddings", "responses"]);

/** How a dialect's route asks for one request. */
export type InferOptions = {
  /** The last event of a stream that failed, in the dialect's shape. */
  errorEvent?: ErrorEvent;
  /** Told the model the body names, once the body is checked. */
  requestedAs?: (model: string) => void;
  /** How long the runner stays loaded once idle after this request (Ollama's per-request `keep_alive`). */
  keepAlive?: string;
  /** The context the runner should have, for this runner only (Ollama's `num_ctx`). */
  contextSize?: number;
  /** Told when the runner's slot is granted (the time before it is the load). */
  leased?: () => void;
  /** Whom the request is for, when not its own key's (a batch's line: its owner's). */
  caller?: Caller;
  /** `batch`: served in the runners' batch lane (see src/scheduler/fair-queue.ts). */
  lane?: Lane;
  /**
   * The body as a dialect rewrote it (the client's was read and translated already): encoded once
   * and checked as any body, instead of read from `request`, whose signal and headers still count.
   */
  json?: unknown;
  /** Rewrites a streamed answer before it is timed, counted and sent (see Forwarded's `reshape`). */
  reshape?: Reshape;
};

/**
 * One inference request: checked, admitted for its key (limits, usage), its runner leased (loaded if
 * need be) in its key's turn, forwarded. However it ends, it is counted once for its key and model.
 */
export function infer(deps: InferenceDeps, endpoint: Endpoint, request: Request, options: InferOptions = {}): Promise<Response> {
  let caller: Caller;
  try {
    caller = options.caller ?? deps.identify?.(request) ?? LOCAL_CALLER;
  } catch (error) {
    return Promise.reject(error);
  }
  const account: Account = {};
  // Callbacks, not an async frame around inferFor's: one frame and its promises less per request.
  return inferFor(caller, account, deps, endpoint, request, options).then(
    (response) => {
      const headers = account.ticket?.headers;
      if (headers) for (const name in headers) response.headers.set(name, headers[name]!);
      return response;
    },
    (error: unknown) => {
      if (account.ticket) account.ticket.fail();
      else deps.meter?.refused(caller, account.model);
      throw error;
    },
  );
}

/** Where a request is counted: the model it names once found (never a name sent, unchecked), its ticket once admitted. */
type Account = { model?: string; ticket?: Ticket };

async function inferFor(caller: Caller, account: Account, deps: InferenceDeps, endpoint: Endpoint, request: Request, options: InferOptions): Promise<Response> {
  const startedAt = performance.now();
  const given = "json" in options;
  const read = given ? undefined : await readBody(request, deps.bodyLimit);
  const parsed = read ? parseJson(read) : options.json;
  const requested = requestedModel(endpoint, parsed);
  options.requestedAs?.(requested);
  const remoteMedia = policeBody(parsed, deps.bodyPolicy);
  // Schemas checked and a named tool_choice made one llama-server obeys, then the token ceiling:
  // each gives back its input when it changes nothing, else a shallow copy (so the media parts
  // policeBody found are still the ones in `json`).
  const checked = structuredRequest(endpoint, parsed);
  const json = boundTokens(endpoint, checked, deps.bounds.maxTokens);
  let body = bytesToSend(endpoint, { read, parsed, checked, json }, deps);
  const model = await resolveOr404(deps.store, requested, { recentMs: SERVING_LOOK_MS });
  if (deps.admits && !deps.admits(model.id)) throw modelNotFound(requested);
  const name = model.tags[0] ?? model.id;
  account.model = name;
  if (!model.mmprojPath) refuseUnreadableMedia(json, name);
  if (deps.meter) account.ticket = deps.meter.admit(caller, name);
  if (remoteMedia.length > 0) {
    // Fetched by us, not by llama-server (see media/fetch.ts), before a runner's slot is taken.
    if (!deps.inlineMedia) throw new HttpError(500, "server_error", "media_fetch_unavailable", "remote media are allowed but cannot be fetched here");
    await deps.inlineMedia(remoteMedia, request.signal);
    body = encodeJson(json, Number.POSITIVE_INFINITY);
  }
  const waitFrom = performance.now();
  let lease: Lease;
  try {
    const wish = { caller: caller.name, lane: options.lane ?? "interactive", keepAlive: options.keepAlive, contextSize: options.contextSize, ...agentSession(deps, endpoint, request, json, caller) };
    lease = await deps.scheduler.acquire(model, ENDPOINTS[endpoint].mode, request.signal, wish);
  } catch (error) {
    if (request.signal.aborted) throw clientGone();
    // A delete that ran between the lookup above and the load took the model's file with it: to
    // the client the model is simply gone, as it would be a moment later.
    if (isLoadFailure(error) && !(await deps.store.resolve(model.id))) throw modelNotFound(requested);
    throw error;
  }
  options.leased?.();
  const waitedMs = performance.now() - waitFrom;
  const stream = (json as { stream?: unknown }).stream === true;
  const path = ENDPOINTS[endpoint].path ?? `/v1/${endpoint}`;
  const timed = TIMED.has(endpoint) ? deps.metrics.timer(name, startedAt) : undefined;
  const timer = account.ticket ? bothTimers(timed, UNTOKENED.has(endpoint) ? tokenless(account.ticket) : account.ticket) : timed;
  const clock = { startedAt, waitedMs };
  const key = deps.promptsPerKey ? caller.name : undefined;
  return forward({ lease, model: name, path, body, request, stream, clock, bounds: deps.bounds, errorEvent: options.errorEvent, timer, key, reshape: options.reshape });
}

/**
 * Endpoints whose prompt a slot keeps: a session's requests there go back to its slot
 * (src/scheduler/affinity.ts). Anthropic's Messages come here as chats (src/dialects/anthropic/).
 */
const CONVERSING = new Set<Endpoint>(["chat/completions", "completions", "responses"]);

/**
 * The agent session a request belongs to, the digest of its prompt's start, and for a request that
 * names no session but has a start, the digest of its conversation's opening. Where prompts are
 * kept per key, starts are too: a key never waits for, nor is handed, a copy of another key's slot.
 */
function agentSession(deps: InferenceDeps, endpoint: Endpoint, request: Request, json: unknown, caller: Caller) {
  if (!deps.sessionAffinity || !CONVERSING.has(endpoint)) return {};
  const session = sessionOf(request.headers, json);
  const start = prefixOf(json);
  if (session === undefined && start === undefined) return {};
  const prefix = start !== undefined && deps.promptsPerKey ? `${caller.name}:${start}` : start;
  return session !== undefined ? { session, prefix } : { prefix, opening: openingOf(json) };
}

/**
 * Endpoints that count or turn text into tokens and process none: each is a request for the ledger,
 * but the tokens its answer names (count_tokens' `input_tokens`) are not used, nor held to a key's limit.
 */
const UNTOKENED = new Set<Endpoint>(["chat/completions/input_tokens", "tokenize", "detokenize"]);

/** A timer told of the answer's end but not of its text (so no tokens are read from it). */
const tokenless = (timer: RequestTimer): RequestTimer => ({ firstByte: () => timer.firstByte(), end: (ok) => timer.end(ok, "") });

/**
 * The body's bytes for the runner, made once: as they came, unless a dialect, the checks or the
 * bound changed it; a token limit the bound only added is spliced into them (clients that set none
 * are common, and an agent's body runs to megabytes: written again, it was serialised twice).
 */
function bytesToSend(endpoint: Endpoint, { read, parsed, checked, json }: { read: Uint8Array<ArrayBuffer> | undefined; parsed: unknown; checked: unknown; json: unknown }, deps: InferenceDeps): Uint8Array<ArrayBuffer> {
  if (read && json === parsed) return read;
  const added = read && checked === parsed ? tokenFieldAdded(endpoint, parsed) : undefined;
  if (read && added !== undefined) return withLeadingField(read, added, deps.bounds.maxTokens);
  return encodeJson(json, deps.bodyLimit + BOUND_FIELD_BYTES);
}

/** Room for the token limit the bound adds to a body that was at the size limit. */
const BOUND_FIELD_BYTES = 64;

const isLoadFailure = (error: unknown) => error instanceof HttpError && error.code === "model_load_failed";

/** Counts each answer by route and status, errors included. (Callbacks, not an async frame: one less per request.) */
export function counted(metrics: InferenceMetrics, route: string, handle: () => Promise<Response>): Promise<Response> {
  let answer: Promise<Response>;
  try {
    answer = handle();
  } catch (error) {
    answer = Promise.reject(error);
  }
  return answer.then(
    (response) => (metrics.countRequest(route, response.status), response),
    (error: unknown) => {
      metrics.countRequest(route, error instanceof HttpError ? error.status : 500);
      throw error;
    },
  );
}

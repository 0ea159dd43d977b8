import { stat } from "node:fs/promises";
import * as z from "zod";
import { unlessAborted } from "../../http/abort.ts";
import { readJson } from "../../http/body.ts";
import { clientGone, HttpError } from "../../http/errors.ts";
import type { Route } from "../../http/router.ts";
import { refuseUnlessAdmin } from "../../keys/access.ts";
import { LOCAL_CALLER } from "../../keys/keyring.ts";
import { counted, infer, type InferenceDeps } from "../../inference/routes.ts";
import type { Endpoint } from "../../inference/requests.ts";
import { modelNotFound } from "../../models/errors.ts";
import { resolveOr404 } from "../../models/lookup.ts";
import { progressStream, type ModelApi, type ModelStore, type StoredModel } from "../../models/index.ts";
import type { PullEvent } from "../../models/pull/plan.ts";
import { parseReference } from "../../models/reference.ts";
import { KEEP_ALIVE_PATTERN, keepAliveMs } from "../../scheduler/policy.ts";
import { OLLAMA_PROGRESS, psEntries, showAnswer, tagEntries, type Sized } from "./models.ts";
import { ndjson, ollamaError, toNdjson } from "./stream.ts";
import * as translate from "./translate.ts";
import { upstreamError } from "../upstream-error.ts";

// Ollama's /api, for the clients that speak it (Open WebUI, editors, ollama-js, ollama-python):
// the model API on our store and puller, inference translated onto llama-server's OpenAI endpoints
// through the same checks, scheduler and metrics as every other route. Errors in Ollama's shape,
// `{"error": "..."}`.

export type OllamaDeps = {
  inference: InferenceDeps;
  store: ModelStore;
  models: ModelApi;
  /** The version /api/version reports. */
  version: string;
};

// Ollama's older clients send `name` where newer ones send `model`.
const named = <T extends z.ZodRawShape>(shape: T) =>
  z
    .looseObject({ model: z.string().trim().min(1).optional(), name: z.string().trim().min(1).optional(), ...shape })
    .refine((body) => body.model ?? body.name, { message: "model is required", path: ["model"] })
    .transform((body) => ({ ...body, model: (body.model ?? body.name)! }));

const keepAlive = z.union([z.string().regex(KEEP_ALIVE_PATTERN, 'keep_alive must be a duration like "5m", "0" or "-1"'), z.number()]).optional();
const think = z.union([z.boolean(), z.enum(["high", "medium", "low"])]).optional();
const options = z.record(z.string(), z.unknown()).optional();
const images = z.array(z.string()).optional();
const Message = z.looseObject({ role: z.string().min(1), content: z.string().optional(), images });

const ChatBody = named({ messages: z.array(Message).optional(), stream: z.boolean().optional(), keep_alive: keepAlive, think, options, format: z.unknown().optional() });
const GenerateBody = named({ prompt: z.string().optional(), system: z.string().optional(), raw: z.boolean().optional(), images, stream: z.boolean().optional(), keep_alive: keepAlive, think, options, format: z.unknown().optional() });
const EmbedBody = named({ input: z.union([z.string(), z.array(z.string()).min(1)]), keep_alive: keepAlive, dimensions: z.number().int().positive().optional(), options });
const EmbeddingsBody = named({ prompt: z.string(), keep_alive: keepAlive, options });
const ModelBody = named({});
const PullBody = named({ stream: z.boolean().optional(), insecure: z.boolean().optional() });
const CopyBody = z.looseObject({ source: z.string().trim().min(1), destination: z.string().trim().min(1) });

/** Management bodies are small. */
const SMALL_BODY = 64 * 1024;

/**
 * An inference request as the usage ledger counts it: once handed to `infer`, there (errors
 * included); refused before (a bad body, an unknown model), here as the other dialects' refusals
 * are: under the model once found, never under a name sent unchecked (see usage/meter.ts).
 */
type Account = { model?: string; handed?: boolean };

export function ollamaRoutes(deps: OllamaDeps): Route[] {
  const { store } = deps;
  const body = <T>(request: Request, schema: z.ZodType<T>, limit = deps.inference.bodyLimit) => readJson(request, limit, schema);

  /** The model a request names (a replica that serves only its pinned models refuses others here too). */
  async function prepare(name: string, account: Account): Promise<StoredModel> {
    const model = await resolveOr404(store, name);
    if (deps.inference.admits && !deps.inference.admits(model.id)) throw modelNotFound(name);
    account.model = model.tags[0] ?? model.id;
    return model;
  }

  /** One request to llama-server through the shared inference path, timed for Ollama's counters. */
  async function run(request: Request, account: Account, endpoint: Endpoint, openai: Record<string, unknown>, keep: string | number | undefined, opts: translate.OllamaOptions | undefined) {
    account.handed = true;
    const startedAt = Date.now();
    let loadedAt = startedAt;
    const contextSize = numCtx(opts);
    const response = await infer(deps.inference, endpoint, request, {
      json: openai,
      ...(keep !== undefined ? { keepAlive: String(keep) } : {}),
      ...(contextSize ? { contextSize } : {}),
      leased: () => (loadedAt = Date.now()),
    });
    const clock = () => ({ startedAt, loadedAt, now: Date.now() });
    return { response, clock };
  }

  /** An empty prompt loads the model (or with keep_alive 0 unloads it): Ollama's load and `ollama stop`. */
  async function loadOrUnload(request: Request, account: Account, model: StoredModel, name: string, keep: string | number | undefined, kind: "chat" | "generate", opts: translate.OllamaOptions | undefined) {
    account.handed = true; // no inference: the ledger counts no load, nor its failure
    const base = { model: name, created_at: new Date().toISOString(), ...(kind === "chat" ? { message: { role: "assistant", content: "" } } : { response: "" }), done: true };
    if (keep !== undefined && keepAliveMs(String(keep)) === 0) {
      // As POST /engines/unload: an admin's (src/keys/access.ts).
      refuseUnlessAdmin(deps.inference.identify?.(request) ?? LOCAL_CALLER, "unloading a model", "other keys use its runners");
      await deps.inference.scheduler.unload((runner) => runner.modelId === model.id);
      return Response.json({ ...base, done_reason: "unload" });
    }
    const contextSize = numCtx(opts);
    const wish = { ...(keep !== undefined ? { keepAlive: String(keep) } : {}), ...(contextSize ? { contextSize } : {}) };
    const lease = await deps.inference.scheduler.acquire(model, "completion", undefined, wish);
    lease.release();
    return Response.json({ ...base, done_reason: "load" });
  }

  async function chat(request: Request, account: Account): Promise<Response> {
    const chat = await body(request, ChatBody);
    const model = await prepare(chat.model, account);
    if (!chat.messages?.length) return loadOrUnload(request, account, model, chat.model, chat.keep_alive, "chat", chat.options);
    const stream = chat.stream ?? true; // Ollama streams unless told not to
    const openai = translate.chatRequest(chat as translate.OllamaChat, stream);
    const { response, clock } = await run(request, account, "chat/completions", openai, chat.keep_alive, chat.options);
    return answer(response, stream, "chat", chat.model, clock);
  }

  async function generate(request: Request, account: Account): Promise<Response> {
    const gen = await body(request, GenerateBody);
    const model = await prepare(gen.model, account);
    if (!gen.prompt && !gen.images?.length) return loadOrUnload(request, account, model, gen.model, gen.keep_alive, "generate", gen.options);
    const stream = gen.stream ?? true;
    const { endpoint, body: openai } = translate.generateRequest(gen as translate.OllamaGenerate, stream);
    const { response, clock } = await run(request, account, endpoint, openai, gen.keep_alive, gen.options);
    return answer(response, stream, "generate", gen.model, clock);
  }

  /** llama-server's answer as Ollama's: NDJSON lines when streamed, one object otherwise. */
  async function answer(response: Response, stream: boolean, kind: "chat" | "generate", model: string, clock: () => translate.Clock): Promise<Response> {
    if (!response.ok) return errorFromUpstream(response);
    if (stream && response.body) return ndjson(response.body.pipeThrough(toNdjson(kind, model, clock)));
    const whole = (await response.json()) as translate.OpenAIAnswer;
    return Response.json(kind === "chat" ? translate.chatAnswer(model, whole, clock()) : translate.generateAnswer(model, whole, clock()));
  }

  async function embed(request: Request, account: Account): Promise<Response> {
    const req = await body(request, EmbedBody);
    await prepare(req.model, account);
    const openai = { model: req.model, input: req.input, ...(req.dimensions ? { dimensions: req.dimensions } : {}) };
    const { response, clock } = await run(request, account, "embeddings", openai, req.keep_alive, req.options);
    if (!response.ok) return errorFromUpstream(response);
    const answer = (await response.json()) as { data: { embedding: number[] }[]; usage?: { prompt_tokens?: number } };
    const { total_duration, load_duration } = translate.counters(undefined, undefined, clock());
    return Response.json({ model: req.model, embeddings: answer.data.map((d) => d.embedding), total_duration, load_duration, prompt_eval_count: answer.usage?.prompt_tokens ?? 0 });
  }

  async function embeddings(request: Request, account: Account): Promise<Response> {
    const req = await body(request, EmbeddingsBody);
    await prepare(req.model, account);
    const { response } = await run(request, account, "embeddings", { model: req.model, input: req.prompt }, req.keep_alive, req.options);
    if (!response.ok) return errorFromUpstream(response);
    const answer = (await response.json()) as { data: { embedding: number[] }[] };
    return Response.json({ embedding: answer.data[0]?.embedding ?? [] });
  }

  const sized = async (model: StoredModel): Promise<Sized> => {
    const files = [model.ggufPath, ...(model.shardPaths ?? []), ...(model.mmprojPath ? [model.mmprojPath] : [])];
    const sizes = await Promise.all(files.map((file) => stat(file).then((s) => s.size, () => 0)));
    return { model, size: sizes.reduce((a, b) => a + b, 0) };
  };

  async function tags(): Promise<Response> {
    const models = await Promise.all((await store.list()).map(sized));
    return Response.json({ models: models.flatMap(tagEntries) });
  }

  async function ps(): Promise<Response> {
    const runners = deps.inference.scheduler.runners();
    const models = new Map<string, Sized>();
    for (const id of new Set(runners.map((r) => r.modelId))) {
      const model = await store.resolve(id);
      if (model) models.set(id, await sized(model));
    }
    return Response.json({ models: psEntries(runners, models, keepAliveMs, Date.now()) });
  }

  async function show(request: Request): Promise<Response> {
    const { model: name } = await body(request, ModelBody, SMALL_BODY);
    return Response.json(showAnswer(await resolveOr404(store, name), name));
  }

  async function pull(request: Request): Promise<Response> {
    const req = await body(request, PullBody, SMALL_BODY);
    const job = await deps.models.pull(req.model, request.signal);
    if (req.stream === false) return pulledWhole(job, request.signal);
    return ndjson(progressStream(job, request.signal, OLLAMA_PROGRESS));
  }

  /** The pull's outcome in one answer; a client that leaves first cancels it, as a streamed one does. */
  async function pulledWhole(job: Awaited<ReturnType<ModelApi["pull"]>>, presence: AbortSignal): Promise<Response> {
    let last: PullEvent | undefined;
    const unlisten = job.listen((event) => (last = event));
    try {
      await unlessAborted(job.done, presence);
    } catch {
      throw clientGone();
    } finally {
      unlisten();
    }
    return last?.type === "error" ? ollamaError(502, last.message) : Response.json({ status: "success" });
  }

  async function remove(request: Request): Promise<Response> {
    const { model } = await body(request, ModelBody, SMALL_BODY);
    await deps.models.remove(model, false);
    return new Response(null, { status: 200 });
  }

  async function copy(request: Request): Promise<Response> {
    const { source, destination } = await body(request, CopyBody, SMALL_BODY);
    const model = await resolveOr404(store, source);
    await store.addTag(model.id, parseReference(destination, store.referenceOptions).key);
    return new Response(null, { status: 200 });
  }

  /**
   * Inference routes count in llamadock_requests_total as the other dialects' do, errors included,
   * and in the usage ledger: a request refused before it was handed to `infer` is counted here.
   */
  const countedAs = (route: string, handle: (request: Request, account: Account) => Promise<Response>) => (request: Request) =>
    counted(deps.inference.metrics, route, async () => {
      const account: Account = {};
      try {
        return await handle(request, account);
      } catch (error) {
        if (!account.handed) deps.inference.meter?.refused(deps.inference.identify?.(request) ?? LOCAL_CALLER, account.model);
        throw error;
      }
    });
  const table: [Route["method"], string, (request: Request) => Promise<Response>][] = [
    ["GET", "/api/version", async () => Response.json({ version: deps.version })],
    ["GET", "/api/tags", tags],
    ["GET", "/api/ps", ps],
    ["POST", "/api/show", show],
    ["POST", "/api/chat", countedAs("api/chat", chat)],
    ["POST", "/api/generate", countedAs("api/generate", generate)],
    ["POST", "/api/embed", countedAs("api/embed", embed)],
    ["POST", "/api/embeddings", countedAs("api/embeddings", embeddings)],
    ["POST", "/api/pull", pull],
    ["DELETE", "/api/delete", remove],
    ["POST", "/api/copy", copy],
  ];
  return table.map(([method, path, handle]) => ({ method, path, handle: inOllamaShape(handle) }));
}

/**
 * `num_ctx`: the context the runner should have. Unlike a configured context it is not saved: as in
 * Ollama it holds for the runner it loads, and the model's settings stay as they are.
 */
function numCtx(opts: translate.OllamaOptions | undefined): number | undefined {
  const value = opts?.num_ctx;
  return typeof value === "number" && Number.isInteger(value) && value > 0 ? value : undefined;
}

/** A refusal met before a route's handler (see src/keys/access.ts), in Ollama's shape on Ollama's routes. */
export const ollamaRefusal = (route: Route, error: HttpError): Response | undefined => (route.path.startsWith("/api/") ? ollamaError(error.status, error.message, error.headers) : undefined);

/** Our errors, and llama-server's, as Ollama's `{"error": "..."}` with the same status. */
function inOllamaShape(handle: (request: Request) => Promise<Response>) {
  return async (request: Request) => {
    try {
      return await handle(request);
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      return ollamaError(error.status, error.message, error.headers);
    }
  };
}

async function errorFromUpstream(response: Response): Promise<Response> {
  const { status, message, headers } = await upstreamError(response);
  return ollamaError(status, message, headers);
}

import type { IRequest } from "itty-router";
import { sseSplitter } from "../http/sse.ts";
import { HttpError, notFound } from "../http/errors.ts";
import { parseJson, readBody } from "../http/body.ts";
import type { Route } from "../http/router.ts";
import { counted, infer, type InferenceDeps } from "../inference/routes.ts";
import { textFormatFields } from "./responses-format.ts";
import { servableInput } from "./responses-input.ts";

// OpenAI's Responses API (what Codex speaks). llama-server serves `/v1/responses` itself, but
// statelessly: it refuses `previous_response_id`. So recent responses are kept here, in memory
// (bounded in count, bytes and age), and a request that continues one is sent on with the
// conversation so far as its input: the earlier input, then the earlier output, then the new input.
// Each is kept for the caller that made it (its API key): for any other it does not exist.

export type ResponseStoreLimits = { maxEntries: number; maxBytes: number; maxAgeMs: number };

type Item = Record<string, unknown>;
type Kept = { response: Item; input: Item[] };
type Stored = Kept & { at: number; bytes: number };

/**
 * A bounded store of recent responses, per caller scope: none outlives its age, and past the count
 * or the bytes the least recently used go first. `bytes` is what the caller measured an entry at.
 */
export function createResponseStore({ maxEntries, maxBytes, maxAgeMs }: ResponseStoreLimits, now = Date.now) {
  // Keyed by scope and id together; in order of use, least recent first.
  const entries = new Map<string, Stored>();
  let total = 0;
  const keyOf = (scope: string, id: string) => `${scope}\n${id}`;
  const drop = (key: string) => {
    const entry = entries.get(key);
    if (!entry) return false;
    total -= entry.bytes;
    return entries.delete(key);
  };
  return {
    get(scope: string, id: string): Kept | undefined {
      const key = keyOf(scope, id);
      const entry = entries.get(key);
      if (!entry) return undefined;
      if (now() - entry.at > maxAgeMs) return void drop(key);
      entries.delete(key);
      entries.set(key, entry);
      return entry;
    },
    put(scope: string, id: string, kept: Kept, bytes: number) {
      const key = keyOf(scope, id);
      drop(key);
      if (bytes > maxBytes || maxEntries === 0) return;
      entries.set(key, { ...kept, at: now(), bytes });
      total += bytes;
      for (const [oldest, entry] of entries) {
        if (entries.size <= maxEntries && total <= maxBytes && now() - entry.at <= maxAgeMs) break;
        drop(oldest);
      }
    },
    delete: (scope: string, id: string) => drop(keyOf(scope, id)),
    /** What is kept now: entries and their bytes. */
    usage: () => ({ entries: entries.size, bytes: total }),
  };
}
export type ResponseStore = ReturnType<typeof createResponseStore>;

/** A request's `input` as items: a string is one user message. */
const itemsOf = (input: unknown): Item[] => (typeof input === "string" ? [{ role: "user", content: input }] : Array.isArray(input) ? (input as Item[]) : []);

const BASES = ["/v1", "/engines/v1", "/engines/llama.cpp/v1"];

/** How much an entry weighs: the JSON text of the response and of the conversation kept with it. */
const weight = (responseText: string, input: Item[]) => responseText.length + JSON.stringify(input).length;

/** `scopeOf` tells whom a request speaks for (see callerScope in src/http/guard.ts). */
export function responsesRoutes(deps: InferenceDeps, store: ResponseStore, scopeOf: (request: Request) => string): Route[] {
  async function create(request: Request): Promise<Response> {
    const scope = scopeOf(request);
    const body = parseJson(await readBody(request, deps.bodyLimit));
    const isObject = typeof body === "object" && body !== null && !Array.isArray(body);
    const { previous_response_id: _, ...rest } = isObject ? (body as Item) : {};
    // The conversation's items rewritten into ones llama-server takes (see responses-input.ts).
    const input = isObject ? servableInput(conversation(body as Item, store, scope)) : undefined;
    const keep = isObject && (body as Item).store !== false;
    // Anything but an object goes on as it came, for the checks to refuse in the usual words.
    const json = isObject ? { ...rest, input, ...textFormatFields(body as Item) } : body;
    const response = await counted(deps.metrics, "responses", () => infer(deps, "responses", request, { json }));
    if (!keep || response.status !== 200 || !response.body) return response;
    const items = itemsOf(input);
    const remember = (answer: Item, text: string) => store.put(scope, String(answer.id), { response: answer, input: items }, weight(text, items));
    if (response.headers.get("content-type")?.startsWith("text/event-stream")) {
      return new Response(response.body.pipeThrough(completedEvents(remember)), response);
    }
    const text = await response.text();
    remember(JSON.parse(text) as Item, text);
    return new Response(text, response);
  }

  const stored = (request: IRequest) => {
    const entry = store.get(scopeOf(request), String(request.params.id));
    if (!entry) throw notFound(`no response with id "${String(request.params.id)}" (responses are kept in memory for a while)`);
    return entry;
  };

  return BASES.flatMap((base): Route[] => [
    { method: "POST", path: `${base}/responses`, handle: create },
    { method: "GET", path: `${base}/responses/:id`, handle: (request) => Response.json(stored(request).response) },
    {
      method: "DELETE",
      path: `${base}/responses/:id`,
      handle(request) {
        stored(request);
        store.delete(scopeOf(request), String(request.params.id));
        return Response.json({ id: request.params.id, object: "response.deleted", deleted: true });
      },
    },
  ]);
}

/** The input to send: the conversation a `previous_response_id` continues (the caller's own), then this input. */
function conversation(body: Item, store: ResponseStore, scope: string): unknown {
  const { input, previous_response_id: previous } = body;
  if (previous === undefined) return input;
  const entry = typeof previous === "string" ? store.get(scope, previous) : undefined;
  if (!entry) {
    throw new HttpError(404, "not_found_error", "response_not_found", `previous response "${String(previous)}" not found (responses are kept in memory for a while)`);
  }
  return [...entry.input, ...((entry.response.output as Item[] | undefined) ?? []), ...itemsOf(input)];
}

/**
 * Passes an SSE stream on unchanged, and hands the response of its `response.completed` event to
 * `remember`, with its JSON text. Only that event is parsed; every chunk goes on as it came.
 */
function completedEvents(remember: (response: Item, text: string) => void): TransformStream<Uint8Array, Uint8Array> {
  const split = sseSplitter();
  return new TransformStream({
    transform(chunk, controller) {
      controller.enqueue(chunk);
      for (const event of split.push(chunk)) {
        if (!event.includes("response.completed")) continue;
        const data = event.split("\n").find((line) => line.startsWith("data: "));
        try {
          const parsed = data ? (JSON.parse(data.slice(6)) as { type?: string; response?: Item }) : undefined;
          if (parsed?.type === "response.completed" && parsed.response) remember(parsed.response, data!);
        } catch {
          // not ours to judge: the event goes on as it came
        }
      }
    },
  });
}

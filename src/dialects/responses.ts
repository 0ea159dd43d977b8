import type { IRequest } from "itty-router";
import { HttpError, notFound } from "../http/errors.ts";
import { parseJson, readBody } from "../http/body.ts";
import type { Route } from "../http/router.ts";
import { counted, infer, type InferenceDeps } from "../inference/routes.ts";
import { textFormatFields } from "./responses-format.ts";

// OpenAI's Responses API (what Codex speaks). llama-server serves `/v1/responses` itself, but
// statelessly: it refuses `previous_response_id`. So recent responses are kept here, in memory
// (bounded in count and age), and a request that continues one is sent on with the conversation
// so far as its input: the earlier input, then the earlier output, then the new input.

export type ResponseStoreLimits = { maxEntries: number; maxAgeMs: number };

type Item = Record<string, unknown>;
type Stored = { response: Item; input: Item[]; at: number };

/** A bounded store of recent responses: the oldest go first, and none outlives its age. */
export function createResponseStore({ maxEntries, maxAgeMs }: ResponseStoreLimits, now = Date.now) {
  const entries = new Map<string, Stored>();
  const fresh = (entry: Stored | undefined) => (entry && now() - entry.at <= maxAgeMs ? entry : undefined);
  return {
    get: (id: string) => fresh(entries.get(id)),
    put(id: string, entry: Omit<Stored, "at">) {
      entries.delete(id);
      entries.set(id, { ...entry, at: now() });
      while (entries.size > maxEntries) entries.delete(entries.keys().next().value!);
    },
    delete: (id: string) => entries.delete(id),
  };
}
export type ResponseStore = ReturnType<typeof createResponseStore>;

/** A request's `input` as items: a string is one user message. */
const itemsOf = (input: unknown): Item[] => (typeof input === "string" ? [{ role: "user", content: input }] : Array.isArray(input) ? (input as Item[]) : []);

const BASES = ["/v1", "/engines/v1", "/engines/llama.cpp/v1"];

export function responsesRoutes(deps: InferenceDeps, store: ResponseStore): Route[] {
  async function create(request: Request): Promise<Response> {
    const body = parseJson(await readBody(request, deps.bodyLimit));
    const isObject = typeof body === "object" && body !== null && !Array.isArray(body);
    const { previous_response_id: _, ...rest } = isObject ? (body as Item) : {};
    const input = isObject ? conversation(body as Item, store) : undefined;
    const keep = isObject && (body as Item).store !== false;
    // Anything but an object goes on as it came, for the checks to refuse in the usual words.
    const json = isObject ? { ...rest, input, ...textFormatFields(body as Item) } : body;
    const response = await counted(deps.metrics, "responses", () => infer(deps, "responses", request, { json }));
    if (!keep || response.status !== 200 || !response.body) return response;
    const remember = (answer: Item) => store.put(String(answer.id), { response: answer, input: itemsOf(input) });
    if (response.headers.get("content-type")?.startsWith("text/event-stream")) {
      return new Response(response.body.pipeThrough(completedEvents(remember)), response);
    }
    const text = await response.text();
    remember(JSON.parse(text) as Item);
    return new Response(text, response);
  }

  const stored = (request: IRequest) => {
    const entry = store.get(String(request.params.id));
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
        store.delete(String(request.params.id));
        return Response.json({ id: request.params.id, object: "response.deleted", deleted: true });
      },
    },
  ]);
}

/** The input to send: the conversation a `previous_response_id` continues, then this input. */
function conversation(body: Item, store: ResponseStore): unknown {
  const { input, previous_response_id: previous } = body;
  if (previous === undefined) return input;
  const entry = typeof previous === "string" ? store.get(previous) : undefined;
  if (!entry) {
    throw new HttpError(404, "not_found_error", "response_not_found", `previous response "${String(previous)}" not found (responses are kept in memory for a while)`);
  }
  return [...entry.input, ...((entry.response.output as Item[] | undefined) ?? []), ...itemsOf(input)];
}

/**
 * Passes an SSE stream on unchanged, and hands the response of its `response.completed` event to
 * `remember`. Only that event is parsed; every chunk goes on as it came.
 */
function completedEvents(remember: (response: Item) => void): TransformStream<Uint8Array, Uint8Array> {
  const decoder = new TextDecoder();
  let pending = "";
  return new TransformStream({
    transform(chunk, controller) {
      controller.enqueue(chunk);
      pending += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = pending.indexOf("\n\n")) >= 0) {
        const event = pending.slice(0, end);
        pending = pending.slice(end + 2);
        if (!event.includes("response.completed")) continue;
        const data = event.split("\n").find((line) => line.startsWith("data: "));
        try {
          const parsed = data ? (JSON.parse(data.slice(6)) as { type?: string; response?: Item }) : undefined;
          if (parsed?.type === "response.completed" && parsed.response) remember(parsed.response);
        } catch {
          // not ours to judge: the event goes on as it came
        }
      }
    },
  });
}

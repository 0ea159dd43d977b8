import { parseJson, readBody, textAtMost, validBody } from "../../http/body.ts";
import { HttpError } from "../../http/errors.ts";
import type { Route } from "../../http/router.ts";
import { counted, infer, type InferenceDeps } from "../../inference/routes.ts";
import { CHAT_SCHEMA, MESSAGES_SCHEMA } from "../../inference/requests.ts";
import { upstreamError } from "../upstream-error.ts";
import { message } from "./answer.ts";
import { chatRequest } from "./request.ts";
import { messageStream } from "./stream.ts";

// Anthropic's Messages API (what Claude Code and the Anthropic SDKs speak), translated here into a
// chat completion (request.ts) and back (answer.ts, stream.ts), so that the body llama-server gets
// is one our slot machinery addresses like any chat: a session's turns on its slot, a shared start
// processed once, displaced conversations parked, exact usage from llama-server's own counts.
// Errors, ours and llama-server's (OpenAI's shape), go in Anthropic's envelope.

const BASES = ["/v1", "/anthropic/v1", "/engines/v1", "/engines/llama.cpp/v1"];

/** Anthropic's error types by status (its API reference). */
function errorType(status: number): string {
  if (status === 400 || status === 422) return "invalid_request_error";
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 413) return "request_too_large";
  if (status === 429) return "rate_limit_error";
  if (status === 503 || status === 529) return "overloaded_error";
  return "api_error";
}

/** A chat tool's place in our checks' words, as the client wrote it (`tools[0].function.parameters` is its `tools[0].input_schema`). */
const inClientsWords = (message: string) => message.replace(/tools\[(\d+)\]\.function\.parameters/g, "tools[$1].input_schema");

export const envelope = (status: number, text: string) => ({ type: "error", error: { type: errorType(status), message: inClientsWords(text) } });

function errorResponse(status: number, text: string, headers: HeadersInit = {}): Response {
  return Response.json(envelope(status, text), { status, headers });
}

/** A failed stream's last event, as Anthropic's API sends one. */
const errorEvent = (error: HttpError) => new TextEncoder().encode(`event: error\ndata: ${JSON.stringify(envelope(error.status, error.message))}\n\n`);

/** An error answer (OpenAI's shape) in Anthropic's envelope; any other answer as it is. */
async function inDialect(response: Response): Promise<Response> {
  if (response.status < 400 || !response.headers.get("content-type")?.startsWith("application/json")) return response;
  const { status, message: text, headers } = await upstreamError(response);
  return errorResponse(status, text, headers);
}

/**
 * The most of a whole answer read to translate it: the runner's chat completion, whose size its
 * tokens bound (a message of the longest context is a few MiB, with llama-server's own fields).
 */
const ANSWER_LIMIT = 64 << 20;

/** A whole answer of the runner as JSON, read up to ANSWER_LIMIT (502 past it). */
const answerJson = async (response: Response) =>
  JSON.parse(await textAtMost(response, ANSWER_LIMIT, () => new HttpError(502, "upstream_error", "answer_too_large", `the runner answered more than ${ANSWER_LIMIT >> 20} MiB`))) as Record<string, unknown>;

/** A whole chat completion as Anthropic's message, with the answer's headers (limits, our overhead). */
async function asMessage(response: Response): Promise<Response> {
  if (response.status !== 200 || !response.headers.get("content-type")?.startsWith("application/json")) return inDialect(response);
  const headers = new Headers(response.headers);
  headers.delete("content-length");
  return new Response(JSON.stringify(message(await answerJson(response))), { status: 200, headers });
}

/** The chat body for a Messages body, checked first in Anthropic's terms (model, messages, max_tokens). */
async function chatBody(request: Request, deps: InferenceDeps, schema: typeof MESSAGES_SCHEMA | typeof CHAT_SCHEMA): Promise<Record<string, unknown>> {
  const body = parseJson(await readBody(request, deps.bodyLimit));
  validBody(schema, body);
  const json = chatRequest(body as Record<string, unknown>);
  // Which stop sequence ended an answer is in llama-server's own account of it, given when asked.
  if ((body as { stop_sequences?: unknown }).stop_sequences !== undefined) json.verbose = true;
  return json;
}

export function anthropicRoutes(deps: InferenceDeps): Route[] {
  const inEnvelope = (handle: (request: Request) => Promise<Response>) => async (request: Request) => {
    try {
      return await handle(request);
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      return errorResponse(error.status, error.message, error.headers);
    }
  };
  const create = inEnvelope((request) =>
    counted(deps.metrics, "messages", async () => {
      const json = await chatBody(request, deps, MESSAGES_SCHEMA);
      if (json.stream !== true) return asMessage(await infer(deps, "chat/completions", request, { json, errorEvent }));
      const reshape = (answer: ReadableStream<Uint8Array>) => answer.pipeThrough(messageStream(envelope));
      return inDialect(await infer(deps, "chat/completions", request, { json, errorEvent, reshape }));
    }),
  );
  const countTokens = inEnvelope((request) =>
    counted(deps.metrics, "messages/count_tokens", async () => {
      const { stream: _, stream_options: __, timings_per_token: ___, verbose: ____, ...json } = await chatBody(request, deps, CHAT_SCHEMA);
      const answer = await inDialect(await infer(deps, "chat/completions/input_tokens", request, { json }));
      if (answer.status !== 200) return answer;
      const { input_tokens } = (await answerJson(answer)) as { input_tokens: number };
      return Response.json({ input_tokens }, { headers: answer.headers });
    }),
  );
  return BASES.flatMap((base): Route[] => [
    { method: "POST", path: `${base}/messages`, handle: create },
    { method: "POST", path: `${base}/messages/count_tokens`, handle: countTokens },
  ]);
}

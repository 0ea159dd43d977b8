import { HttpError } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import { counted, infer, type InferenceDeps } from "../inference/routes.ts";
import type { Endpoint } from "../inference/requests.ts";
import { upstreamError } from "./upstream-error.ts";

// Anthropic's Messages API (what Claude Code and the Anthropic SDKs speak). llama-server serves it
// natively, so this is a route table plus forwarding, byte for byte, SSE events included; only
// errors are ours to shape: Anthropic's envelope `{"type":"error","error":{"type","message"}}`,
// for our own refusals and for llama-server's (which answers in OpenAI's shape).

const BASES = ["/v1", "/anthropic/v1", "/engines/v1", "/engines/llama.cpp/v1"];
const ENDPOINTS: Endpoint[] = ["messages", "messages/count_tokens"];

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

const envelope = (status: number, message: string) => ({ type: "error", error: { type: errorType(status), message } });

function errorResponse(status: number, message: string, headers: HeadersInit = {}): Response {
  return Response.json(envelope(status, message), { status, headers });
}

/** A failed stream's last event, as Anthropic's API sends one. */
const errorEvent = (error: HttpError) => new TextEncoder().encode(`event: error\ndata: ${JSON.stringify(envelope(error.status, error.message))}\n\n`);

/** An error answer from llama-server (OpenAI's shape) in Anthropic's; any other answer as it is. */
async function inDialect(response: Response): Promise<Response> {
  if (response.status < 400 || !response.headers.get("content-type")?.startsWith("application/json")) return response;
  const { status, message, headers } = await upstreamError(response);
  return errorResponse(status, message, headers);
}

/**
 * llama-server (v0.5.0) leaves out a stream's first event, `message_start`, in many concurrent
 * streams (measured straight on its socket: 114 to 245 of 400 streams, 4 at a time); Anthropic's
 * SDK then fails ("request ended without sending any chunks"). When the first event is anything
 * else, one is put before it; every byte after passes as it came.
 */
export function withMessageStart(model: string): TransformStream<Uint8Array, Uint8Array> {
  const decoder = new TextDecoder();
  let head = "";
  let checked = false;
  return new TransformStream({
    transform(chunk, controller) {
      if (checked) return controller.enqueue(chunk);
      head += decoder.decode(chunk, { stream: true });
      if (!head.includes("\n\n") && head.length < 64) return; // not enough to tell yet
      checked = true;
      if (!head.startsWith("event: message_start")) controller.enqueue(new TextEncoder().encode(messageStart(model)));
      controller.enqueue(new TextEncoder().encode(head));
    },
    flush(controller) {
      if (!checked && head) controller.enqueue(new TextEncoder().encode(head));
    },
  });
}

function messageStart(model: string): string {
  const message = {
    id: `msg_${crypto.randomUUID().replaceAll("-", "")}`,
    type: "message",
    role: "assistant",
    content: [],
    model,
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 0, output_tokens: 0 },
  };
  return `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message })}\n\n`;
}

/** A streamed answer of /v1/messages with its first event made sure of. */
function streamed(response: Response, model: string): Response {
  if (!response.body || !response.headers.get("content-type")?.startsWith("text/event-stream")) return response;
  return new Response(response.body.pipeThrough(withMessageStart(model)), response);
}

export function anthropicRoutes(deps: InferenceDeps): Route[] {
  const handle = (endpoint: Endpoint) => async (request: Request) => {
    try {
      let model = "";
      const response = await inDialect(await counted(deps.metrics, endpoint, () => infer(deps, endpoint, request, { errorEvent, requestedAs: (m) => (model = m) })));
      return endpoint === "messages" ? streamed(response, model) : response;
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      return errorResponse(error.status, error.message, error.headers);
    }
  };
  return BASES.flatMap((base) => ENDPOINTS.map((endpoint): Route => ({ method: "POST", path: `${base}/${endpoint}`, handle: handle(endpoint) })));
}

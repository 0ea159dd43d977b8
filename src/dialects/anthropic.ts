import { HttpError } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import { counted, infer, type InferenceDeps } from "../inference/routes.ts";
import type { Endpoint } from "../inference/requests.ts";
import type { Reshape } from "../inference/forward.ts";
import { completeUsage, promptUsage, withFullUsage } from "./anthropic-usage.ts";
import { upstreamError } from "./upstream-error.ts";

// Anthropic's Messages API (what Claude Code and the Anthropic SDKs speak). llama-server serves it
// natively, so this is a route table plus forwarding; ours to shape are the errors (Anthropic's
// envelope `{"type":"error","error":{"type","message"}}`, for our own refusals and for
// llama-server's, which answers in OpenAI's shape) and the usage, which llama-server says in part
// (see anthropic-usage.ts).

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

/** A whole message of llama-server's with Anthropic's full usage (see anthropic-usage.ts); anything else as it is. */
async function withUsage(response: Response): Promise<Response> {
  if (response.status !== 200 || !response.headers.get("content-type")?.startsWith("application/json")) return response;
  const text = await response.text();
  let message: unknown;
  try {
    message = JSON.parse(text);
  } catch {
    return new Response(text, response); // not ours to judge: it goes on as it came
  }
  const isMessage = typeof message === "object" && message !== null && !Array.isArray(message);
  return new Response(isMessage ? JSON.stringify(withFullUsage(message as { usage?: Record<string, unknown> })) : text, response);
}

export function anthropicRoutes(deps: InferenceDeps): Route[] {
  const handle = (endpoint: Endpoint) => async (request: Request) => {
    try {
      if (endpoint !== "messages") return await inDialect(await counted(deps.metrics, endpoint, () => infer(deps, endpoint, request, { errorEvent })));
      let model = "";
      const reshape: Reshape = (answer, runner) => answer.pipeThrough(completeUsage(model, () => promptUsage(runner, { split: !deps.promptsPerKey })));
      const options = { errorEvent, requestedAs: (m: string) => (model = m), reshape };
      return await withUsage(await inDialect(await counted(deps.metrics, endpoint, () => infer(deps, endpoint, request, options))));
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      return errorResponse(error.status, error.message, error.headers);
    }
  };
  return BASES.flatMap((base) => ENDPOINTS.map((endpoint): Route => ({ method: "POST", path: `${base}/${endpoint}`, handle: handle(endpoint) })));
}

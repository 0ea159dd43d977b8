import { errorResponse } from "../http/errors.ts";
import { relay } from "../http/relay.ts";
import type { FetchHandler } from "./types.ts";

/** Nothing here dies on its own: a signal that never aborts, made once. */
const NEVER = new AbortController().signal;

/** Answers that are streams (SSE, NDJSON progress): they hold their place until they end. */
const STREAMED = /^(text\/event-stream|application\/x-ndjson)/;

/**
 * At most `max` requests in flight through `handler`; more get 503 at once. For servers that do not
 * count connections (Bun's, Deno's): a flood of clients cannot pile up work without bound. A request
 * counts until its answer is ready, a streamed answer until its body ends or its client leaves.
 */
export function capInFlight(handler: FetchHandler, max: number): FetchHandler {
  let inFlight = 0;
  return async (request) => {
    if (inFlight >= max) {
      return errorResponse(503, "unavailable_error", "too_many_connections", `more than ${max} requests at once`, { "retry-after": "1" });
    }
    inFlight++;
    let counted = true;
    let streaming = false;
    const leave = () => {
      if (counted) inFlight--;
      counted = false;
    };
    try {
      const response = await handler(request);
      // The type first: reading `body` makes some runtimes (Bun) wrap a buffered answer in a JS stream.
      if (!STREAMED.test(response.headers.get("content-type") ?? "") || !response.body) return response;
      streaming = true;
      return new Response(relay(response.body, { died: NEVER, clientGone: request.signal }, leave, async () => undefined), response);
    } finally {
      // A streamed answer gives its place back when it ends; every other one here.
      if (!streaming) leave();
    }
  };
}

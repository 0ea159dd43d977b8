import { HttpError } from "../http/errors.ts";
import { infer, type InferenceDeps } from "../inference/routes.ts";
import type { Endpoint } from "../inference/requests.ts";
import type { RunLine } from "./batches.ts";

// One batch line as an inference request of its owner's key in the batch lane: through the same
// checks, scheduler, usage and metrics as any request (not held to the key's per-minute limits: a
// batch is paced by the room interactive requests leave, and its tokens count in usage).

const UNLIMITED = { inFlight: 0, requestsPerMinute: 0, tokensPerMinute: 0 };

export function lineRunner(deps: InferenceDeps): RunLine {
  return async (line, owner, signal) => {
    const endpoint = line.url.slice("/v1/".length) as Endpoint;
    const request = new Request(`http://batch${line.url}`, { method: "POST", signal });
    try {
      const response = await infer(deps, endpoint, request, { json: { ...line.body, stream: false }, caller: { name: owner, admin: false, limits: UNLIMITED }, lane: "batch" });
      return { status: response.status, body: (await response.json()) as unknown };
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      return { status: error.status, body: { error: { message: error.message, type: error.type, code: error.code } } };
    }
  };
}

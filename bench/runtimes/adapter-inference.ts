import { bodyReader, readerResponse } from "../../src/runtime/chunks.ts";
import { callHeaders } from "./runner-call.ts";

// The adapter step's inference handler (bench:inference's and bench:runtimes' BENCH_STEPS=1 side,
// and bench:handlers'): the body sent to the runner as it came, the answer's type and status passed
// on; a stream by chunks (chunks.ts, as ours relays it), a whole answer as one buffer.

/** The handler, asking the runner through `call` (the runtime's Unix-socket fetch). */
export const adapterInference =
  (call: typeof fetch) =>
  async (request: Request): Promise<Response> => {
    const body = new Uint8Array(await request.arrayBuffer());
    const path = new URL(request.url).pathname;
    const upstream = await call(`http://runner${path}`, { method: "POST", headers: callHeaders(body), body, signal: request.signal });
    const type = upstream.headers.get("content-type") ?? "application/json";
    const init = { status: upstream.status, headers: { "content-type": type } };
    const reader = type.startsWith("text/event-stream") ? bodyReader(upstream) : undefined;
    return reader ? readerResponse(reader, init) : new Response(await upstream.arrayBuffer(), init);
  };

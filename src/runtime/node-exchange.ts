import type { IncomingMessage, ServerResponse } from "node:http";
import type { FetchHandler } from "./types.ts";
import { pacedStream } from "./paced-stream.ts";

// One exchange of node:http (under Node and Deno) as a fetch handler sees it: the native Request
// in, the native Response out. Written for this path alone: @whatwg-node/server's general adapter
// cost Node about three times the requests per second a bare node:http proxy reaches (bench:runtimes).
// What it keeps: the request's signal aborts when its client leaves before the answer's end, and
// the answer's body is then cancelled (a stream that produces on its own would go on for nobody);
// a body the handler has whole goes out in one write, with its length.

const NO_BODY = new Set(["GET", "HEAD"]);

/** Serves one node:http request with `handler`; never throws. */
export function serveExchange(handler: FetchHandler, req: IncomingMessage, res: ServerResponse): void {
  const departed = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) departed.abort(new DOMException("the client went away", "AbortError"));
  };
  res.once("close", onClose);
  let request: Request;
  try {
    request = toRequest(req, departed.signal);
  } catch {
    return void res.writeHead(400, { "content-type": "application/json" }).end(BAD_REQUEST);
  }
  Promise.resolve()
    .then(() => handler(request))
    .then(
      (response) => send(response, res, departed.signal),
      () => void (res.headersSent ? res.destroy() : res.writeHead(500, { "content-type": "application/json" }).end(INTERNAL)),
    );
}

const BAD_REQUEST = JSON.stringify({ error: { message: "malformed request", type: "invalid_request_error", code: "bad_request" } });
const INTERNAL = JSON.stringify({ error: { message: "internal error", type: "internal_error", code: "internal_error" } });

function toRequest(req: IncomingMessage, signal: AbortSignal): Request {
  const host = req.headers.host;
  const url = `http://${host || "localhost"}${req.url}`;
  const method = req.method ?? "GET";
  const headers = rawHeaderPairs(req.rawHeaders);
  if (NO_BODY.has(method)) return new Request(url, { method, headers, signal });
  return new Request(url, { method, headers, signal, body: bodyStream(req), duplex: "half" } as RequestInit);
}

function rawHeaderPairs(raw: string[]): [string, string][] {
  const pairs: [string, string][] = [];
  for (let i = 0; i < raw.length; i += 2) pairs.push([raw[i]!, raw[i + 1]!]);
  return pairs;
}

/** The request body as a web stream that reads from the socket only as fast as it is read. */
function bodyStream(req: IncomingMessage): ReadableStream<Uint8Array> {
  // Cancelled: drained, so that the connection can serve the next request.
  return pacedStream(req, { cancel: () => void req.resume() });
}

function headerList(response: Response): string[] {
  const flat: string[] = [];
  for (const [name, value] of response.headers) flat.push(name, value);
  return flat;
}

/** Waits until the current microtasks ran: a body that is already whole has settled its next read by then. */
const afterMicrotasks = () => new Promise<void>((resolve) => process.nextTick(resolve));

async function send(response: Response, res: ServerResponse, departed: AbortSignal): Promise<void> {
  const headers = headerList(response);
  const { status } = response;
  if (!response.body) return void res.writeHead(status, headers).end();
  const reader = response.body.getReader();
  const cancel = () => void reader.cancel(departed.reason).catch(() => {});
  if (departed.aborted) return cancel();
  departed.addEventListener("abort", cancel, { once: true });
  try {
    let chunk = await reader.read();
    if (chunk.done) return void res.writeHead(status, headers).end();
    // The common answer is whole already (JSON): one write with its length, not chunked.
    let settled = false;
    const next = reader.read().finally(() => (settled = true));
    await afterMicrotasks();
    if (settled && (await next).done) {
      headers.push("content-length", String(chunk.value.byteLength));
      return void res.writeHead(status, headers).end(chunk.value);
    }
    res.writeHead(status, headers);
    for (let pending = next; !chunk.done; pending = reader.read()) {
      if (!res.write(chunk.value)) await drained(res, departed);
      chunk = await pending;
    }
    res.end();
  } catch {
    res.destroy(); // the body failed midway, or its client left: no well-formed end can follow
  } finally {
    departed.removeEventListener("abort", cancel);
  }
}

function drained(res: ServerResponse, departed: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (departed.aborted) return reject(departed.reason);
    const done = () => {
      res.off("drain", done);
      departed.removeEventListener("abort", done);
      if (departed.aborted) reject(departed.reason);
      else resolve();
    };
    res.once("drain", done);
    departed.addEventListener("abort", done, { once: true });
  });
}

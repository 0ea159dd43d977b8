import type { IncomingMessage, ServerResponse } from "node:http";
import type { FetchHandler } from "./types.ts";
import type { BodyDeadline } from "./body-deadline.ts";
import { answering, lazyRequest } from "./node-request.ts";
import { LightHeaders } from "./node-headers.ts";
import { LightResponse, type WholeAnswer } from "./node-response.ts";

// One exchange of node:http (under Node and Deno) as a fetch handler sees it: a Request in
// (node-request.ts), a Response out (node-response.ts). Written for this path alone: @whatwg-node/server's general adapter
// cost Node about three times the requests per second a bare node:http proxy reaches (bench:runtimes).
// What it keeps: the request's signal aborts when its client leaves before the answer's end, and
// the answer's body is then cancelled (a stream that produces on its own would go on for nobody);
// a body the handler has whole goes out in one write, with its length; the request's body is bound
// by an idle deadline, read or not (node-request.ts).

/** Serves one node:http request with `handler`; never throws. */
export function serveExchange(handler: FetchHandler, req: IncomingMessage, res: ServerResponse, deadline: BodyDeadline): void {
  const departed = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) departed.abort(new DOMException("the client went away", "AbortError"));
  };
  res.once("close", onClose);
  const request = lazyRequest(req, departed.signal, deadline);
  if (!request) return void res.writeHead(400, { "content-type": "application/json" }).end(BAD_REQUEST);
  Promise.resolve()
    .then(() => handler(request))
    .then(
      // A failure here is ours (a header node:http refuses...): the connection goes, the error is
      // said (the handlers' own errors are logged and counted before they get here), the server stays.
      (response) => (answering(request, res), send(response, res, departed.signal).catch((error) => (res.destroy(), console.error("llamadock: an answer could not be written:", error)))),
      () => (answering(request, res), void (res.headersSent ? res.destroy() : res.writeHead(500, { "content-type": "application/json" }).end(INTERNAL))),
    );
}

const BAD_REQUEST = JSON.stringify({ error: { message: "malformed request", type: "invalid_request_error", code: "bad_request" } });
const INTERNAL = JSON.stringify({ error: { message: "internal error", type: "internal_error", code: "internal_error" } });

/** Waits until the current microtasks ran: a body that is already whole has settled its next read by then. */
const afterMicrotasks = () => new Promise<void>((resolve) => process.nextTick(resolve));

/** A light answer still whole: its body in one write, with its length, and nothing made in between. */
function sendWhole({ status, headers, body }: WholeAnswer, res: ServerResponse): void {
  if (body === undefined) return void res.writeHead(status, headers).end();
  headers.push("content-length", String(typeof body === "string" ? Buffer.byteLength(body) : body.byteLength));
  res.writeHead(status, headers).end(body);
}

async function send(response: Response, res: ServerResponse, departed: AbortSignal): Promise<void> {
  const whole = LightResponse.wholeOf(response);
  if (whole) return sendWhole(whole, res);
  const { status, headers, body: reader } = LightResponse.streamOf(response) ?? { status: response.status, headers: LightHeaders.flatList(response.headers), body: response.body?.getReader() };
  if (!reader) return void res.writeHead(status, headers).end();
  const cancel = () => void reader.cancel(departed.reason).catch(() => {});
  if (departed.aborted) return cancel();
  departed.addEventListener("abort", cancel, { once: true });
  let pending: Promise<ReadableStreamReadResult<Uint8Array>> | undefined;
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
    const corked = corking(res);
    for (pending = next; !chunk.done; pending = reader.read()) {
      corked.write();
      if (!res.write(chunk.value)) await drained(res, departed);
      chunk = await pending;
    }
    res.end();
  } catch {
    pending?.catch(() => {}); // a read still on its way when the client left: nobody waits for it now
    res.destroy(); // the body failed midway, or its client left: no well-formed end can follow
  } finally {
    departed.removeEventListener("abort", cancel);
  }
}

/**
 * Chunks written in one turn go out in one write: the socket is corked at a turn's first write and
 * uncorked at its end. A short answer's last events and the chunked terminator, arriving together,
 * were a write (a syscall, about a fifth of Node's CPU on short streams) each. The socket, not the
 * response: Node 22's corked response keeps chunks aside and sends them after the terminator that
 * end() writes (the client never sees them).
 */
function corking(res: ServerResponse): { write(): void } {
  const socket = res.socket;
  let corked = false;
  const uncork = () => {
    corked = false;
    if (!res.writableEnded) socket!.uncork(); // end() flushed it already
  };
  return {
    write() {
      if (corked || !socket) return;
      corked = true;
      socket.cork();
      process.nextTick(uncork);
    },
  };
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

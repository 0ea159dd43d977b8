import type { IncomingMessage, ServerResponse } from "node:http";
import type { FetchHandler } from "./types.ts";
import type { ChunkReader } from "./chunks.ts";
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
  // A streamed answer's writer, while it writes: the client's leaving stops it (not a listener on
  // the signal, which Node's EventTarget makes a few objects for).
  let streaming: StreamedSend | undefined;
  const onClose = () => {
    if (res.writableFinished) return;
    departed.abort(new DOMException("the client went away", "AbortError"));
    streaming?.cancel(departed.signal.reason);
  };
  res.once("close", onClose);
  const request = lazyRequest(req, departed.signal, deadline);
  if (!request) return void res.writeHead(400, { "content-type": "application/json" }).end(BAD_REQUEST);
  // The handler runs in a job, not at once: node:http emits the request when its headers are
  // parsed, before the body that came in the same packet; a job later that body is in the buffer,
  // taken whole (node-request.ts). Called at once, it waited on the stream (measured: a streamed
  // completion's CPU 7% worse side by side, though one promise fewer).
  Promise.resolve()
    .then(() => handler(request))
    .then(
      (response) => {
        answering(request, res);
        try {
          streaming = send(response, res);
          if (streaming && departed.signal.aborted) streaming.cancel(departed.signal.reason);
        } catch (error) {
          writeFailed(res, error);
        }
      },
      () => (answering(request, res), void (res.headersSent ? res.destroy() : res.writeHead(500, { "content-type": "application/json" }).end(INTERNAL))),
    );
}

/**
 * A failure here is ours (a header node:http refuses...): the connection goes, the error is said
 * (the handlers' own errors are logged and counted before they get here), the server stays.
 */
function writeFailed(res: ServerResponse, error: unknown): void {
  res.destroy();
  console.error("llamadock: an answer could not be written:", error);
}

const BAD_REQUEST = JSON.stringify({ error: { message: "malformed request", type: "invalid_request_error", code: "bad_request" } });
const INTERNAL = JSON.stringify({ error: { message: "internal error", type: "internal_error", code: "internal_error" } });

/** A light answer still whole: its body in one write, with its length, and nothing made in between. */
function sendWhole({ status, headers, body }: WholeAnswer, res: ServerResponse): void {
  if (body === undefined) return void res.writeHead(status, headers).end();
  headers.push("content-length", String(typeof body === "string" ? Buffer.byteLength(body) : body.byteLength));
  res.writeHead(status, headers).end(body);
}

/** Sends `response`: at once when it is whole, else by a writer that it returns (for the client's leaving to stop). */
function send(response: Response, res: ServerResponse): StreamedSend | undefined {
  const whole = LightResponse.wholeOf(response);
  if (whole) return void sendWhole(whole, res);
  const { status, headers, body: reader } = LightResponse.streamOf(response) ?? { status: response.status, headers: LightHeaders.flatList(response.headers), body: response.body?.getReader() };
  if (!reader) return void res.writeHead(status, headers).end();
  return new StreamedSend(res, reader, status, headers).start();
}

type Read = ReadableStreamReadResult<Uint8Array>;

/**
 * A body read as chunks, written out as they come, by callbacks made once per answer: an async loop
 * kept a frame and resumed it at each chunk (with its helpers, 2.5 KB a short stream under Node
 * against 0.7 now; see docs/benchmarks.md). The common answer is whole already (JSON): when its
 * reader ends in the turn its first chunk came in, it goes in one write with its length, not
 * chunked. Written while the socket takes it; read again on drain.
 */
class StreamedSend {
  /** The first chunk, kept until its turn ends or the end follows it in that turn. */
  #held: Uint8Array | undefined;
  #over = false;
  #corked = false;
  readonly #res: ServerResponse;
  readonly #reader: ChunkReader;
  readonly #status: number;
  readonly #headers: string[];

  constructor(res: ServerResponse, reader: ChunkReader, status: number, headers: string[]) {
    this.#res = res;
    this.#reader = reader;
    this.#status = status;
    this.#headers = headers;
  }

  start(): this {
    this.#reader.read().then(this.#first, this.#failed);
    return this;
  }

  /** The chunks at hand taken at once (see ChunkReader's `take`), then a read for the next. */
  #readNext(): void {
    const reader = this.#reader;
    for (let chunk = reader.take?.(); chunk; chunk = reader.take?.()) if (!this.#took(chunk)) return;
    reader.read().then(this.#next, this.#failed);
  }

  /** The client left: the body is cancelled (a stream that produces on its own would go on for nobody). */
  cancel(reason: unknown): void {
    if (this.#over) return;
    this.#over = true;
    this.#reader.cancel(reason).catch(() => {});
  }

  readonly #first = (chunk: Read): void => {
    if (this.#over) return;
    if (chunk.done) return this.#end(undefined);
    this.#held = chunk.value;
    this.#readNext();
    process.nextTick(this.#turnEnded); // after the microtasks: a body already whole has settled its next read by then
  };

  /** The first chunk's turn ended without the body's end: the answer goes chunked, as it comes. */
  readonly #turnEnded = (): void => {
    const held = this.#held;
    if (held === undefined || this.#over) return;
    this.#held = undefined;
    this.#write(held); // the next read is on its way already: a full socket is waited for after it
  };

  readonly #next = (chunk: Read): void => {
    if (this.#took(chunk)) this.#readNext();
  };

  /** Sends a chunk read (or ends the answer); whether to read on now (no end, no full socket). */
  #took(chunk: Read): boolean {
    if (this.#over) return false;
    if (chunk.done) {
      this.#end(this.#held);
      return false;
    }
    this.#turnEnded(); // the first chunk, if its turn has not ended yet
    if (this.#over) return false;
    if (this.#write(chunk.value)) return true;
    if (!this.#over) this.#res.once("drain", this.#drained);
    return false;
  }

  readonly #drained = (): void => {
    if (!this.#over) this.#readNext();
  };

  /** The body failed midway: no well-formed end can follow. */
  readonly #failed = (): void => {
    if (this.#over) return;
    this.#over = true;
    this.#res.destroy();
  };

  /** Writes a chunk, the head before the first: false when the socket wants a drain first (or the write failed). */
  #write(chunk: Uint8Array): boolean {
    try {
      if (!this.#res.headersSent) this.#res.writeHead(this.#status, this.#headers);
      this.#cork();
      return this.#res.write(chunk);
    } catch (error) {
      this.#broke(error);
      return false;
    }
  }

  /** Ends the answer; `whole`: all of its body, nothing sent yet, so it goes with its length. */
  #end(whole: Uint8Array | undefined): void {
    this.#over = true;
    try {
      if (this.#res.headersSent) return void this.#res.end();
      if (whole) this.#headers.push("content-length", String(whole.byteLength));
      this.#res.writeHead(this.#status, this.#headers).end(whole);
    } catch (error) {
      this.#broke(error);
    }
  }

  /**
   * Chunks written in one turn go out in one write: the socket is corked at a turn's first write and
   * uncorked at its end. A short answer's last events and the chunked terminator, arriving together,
   * were a write (a syscall, about a fifth of Node's CPU on short streams) each. The socket, not the
   * response: Node 22's corked response keeps chunks aside and sends them after the terminator that
   * end() writes (the client never sees them).
   */
  #cork(): void {
    const socket = this.#res.socket;
    if (this.#corked || !socket) return;
    this.#corked = true;
    socket.cork();
    process.nextTick(this.#uncork);
  }

  readonly #uncork = (): void => {
    this.#corked = false;
    if (!this.#res.writableEnded) this.#res.socket?.uncork(); // end() flushed it already
  };

  /** A write threw (ours: a header node:http refuses...): the answer ends there, its body with it. */
  #broke(error: unknown): void {
    this.#over = true;
    this.#reader.cancel(error).catch(() => {});
    writeFailed(this.#res, error);
  }
}

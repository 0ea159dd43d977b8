import type { IncomingMessage, ServerResponse } from "node:http";
import { idleClock, type BodyDeadline } from "./body-deadline.ts";
import { pacedStream, readWhole, viewOf } from "./paced-stream.ts";
import { arrayBufferOf, utf8 } from "./node-response.ts";

// A node:http request as the fetch handler's Request, made only as far as the handler looks at
// it. A native Request per exchange (its Headers, its signal's following, a web stream for the
// body) was the largest share of the adapter's CPU under Node (bench:runtimes). Most handlers read
// the method, the URL, a few headers, the signal and the whole body: those come straight from the
// IncomingMessage. Anything else (the body as a stream, clone(), formData()...) makes the native
// Request once and answers from it. It is a Request to `instanceof`, as @hono/node-server's is.

const SOURCE = Symbol("incoming message");
const URL_ = Symbol("url");
const SIGNAL = Symbol("signal");
const HEADERS = Symbol("headers");
const NATIVE = Symbol("native request");
const READ = Symbol("body read");
const DEADLINE = Symbol("body deadline");
const STALLED = Symbol("body stalled");

type Lazy = Request & {
  [SOURCE]: IncomingMessage;
  [URL_]: string;
  [SIGNAL]: AbortSignal;
  [HEADERS]?: Headers;
  [NATIVE]?: Request;
  [READ]?: boolean;
  [DEADLINE]: BodyDeadline;
  [STALLED]?: boolean;
};

const NO_BODY = new Set(["GET", "HEAD"]);

/**
 * The Request a handler sees for `req`; `signal` aborts when its client leaves; its body's reads
 * fail under `deadline` (see body-deadline.ts). Undefined if its URL is not one.
 */
export function lazyRequest(req: IncomingMessage, signal: AbortSignal, deadline: BodyDeadline): Request | undefined {
  const url = `http://${req.headers.host || "localhost"}${req.url}`;
  if (!URL.canParse(url)) return undefined;
  const request = Object.create(prototype) as Lazy;
  request[SOURCE] = req;
  request[URL_] = url;
  request[SIGNAL] = signal;
  request[DEADLINE] = deadline;
  return request;
}

/**
 * Settles the body of `request` as its answer goes out, if it has not all arrived. One that
 * stalled closes the connection after the answer (the rest of it may never come). One nobody read
 * (an error answered first) is drained, as node:http would, but under the idle deadline, which
 * node:http's own draining knows nothing of: without it a client gone silent held the connection.
 */
export function answering(request: Request, res: ServerResponse): void {
  const lazy = request as Lazy;
  const req = lazy[SOURCE];
  if (req.complete) return;
  if (lazy[STALLED]) return void (res.shouldKeepAlive = false);
  const body = lazy[NATIVE]?.body;
  if (body && !body.locked) void body.cancel().catch(() => {}); // drained by its cancel
  else if (!lazy[NATIVE] && !lazy[READ]) drain(req, lazy[DEADLINE].idleMs);
}

/** Reads `req` to its end for nobody; a silence of `idleMs` closes its connection. */
function drain(req: IncomingMessage, idleMs: number): void {
  const clock = idleClock(idleMs, () => req.socket?.destroy());
  clock.wait();
  req.on("data", () => clock.wait());
  req.once("end", () => clock.stop());
  req.once("close", () => clock.stop());
  req.resume();
}

/** The body's reads fail with the caller's error from here; the connection closes after the answer. */
function stalled(request: Lazy): unknown {
  request[STALLED] = true;
  return request[DEADLINE].stalled(request[DEADLINE].idleMs);
}

function headersOf(raw: string[]): Headers {
  const headers = new Headers();
  for (let i = 0; i < raw.length; i += 2) headers.append(raw[i]!, raw[i + 1]!);
  return headers;
}

/** The native Request, made once, reading the body from the socket as it is read. */
function native(request: Lazy): Request {
  if (request[NATIVE]) return request[NATIVE];
  const req = request[SOURCE];
  const method = req.method ?? "GET";
  const init: RequestInit & { duplex?: string } = { method, headers: request.headers, signal: request[SIGNAL] };
  // Cancelled: drained, so that the connection can serve the next request.
  if (!NO_BODY.has(method) && !request[READ]) {
    const { idleMs } = request[DEADLINE];
    const hooks = { cancel: () => drain(req, idleMs), idle: { ms: idleMs, stalled: () => stalled(request) } };
    Object.assign(init, { body: pacedStream(req, hooks), duplex: "half" });
  }
  return (request[NATIVE] = new Request(request[URL_], init));
}

/** The whole body, straight from the socket: no web stream in between. */
function wholeBody(request: Lazy): Promise<Buffer> {
  if (request[READ]) return Promise.reject(new TypeError("Body is unusable: Body has already been read"));
  request[READ] = true;
  const req = request[SOURCE];
  if (NO_BODY.has(req.method ?? "GET")) return Promise.resolve(Buffer.alloc(0));
  // Arrived whole already (a small body comes with its headers, and the handler runs after they
  // were parsed): its declared length is all in the buffer, taken at once, without a listener, a
  // race and a flowing stream. (node:http marks the message complete only later.)
  const declared = Number(req.headers["content-length"]);
  if (declared > 0 && req.readableLength === declared && !req.readableFlowing && !req.destroyed) return Promise.resolve(buffered(req, declared));
  return arriving(request);
}

/** The whole body as it arrives, failing if it stops arriving for the idle deadline, or if its client leaves. */
function arriving(request: Lazy): Promise<Buffer> {
  const req = request[SOURCE];
  return new Promise((resolve, reject) => {
    const clock = idleClock(request[DEADLINE].idleMs, () => (req.pause(), reject(stalled(request))));
    clock.wait();
    req.on("data", () => clock.wait());
    readWhole(req).then(
      (body) => (clock.stop(), resolve(body)),
      (error: unknown) => (clock.stop(), reject(error)),
    );
    // The client left before the body's end: node:http may close without an error.
    req.once("close", () => req.complete || (clock.stop(), reject(new TypeError("terminated: the client went away"))));
  });
}

/** The `length` bytes a message holds in its buffer, all of its body; then left to flow to its end (its 'end' and 'close' come as after any read). */
function buffered(req: IncomingMessage, length: number): Buffer {
  const body = req.read(length) as Buffer;
  req.resume();
  return body;
}

/** What a handler commonly reads, answered without the native Request while there is none. */
const direct: Record<string, PropertyDescriptor> = {
  method: { get: function (this: Lazy) { return this[SOURCE].method ?? "GET"; } },
  url: { get: function (this: Lazy) { return this[URL_]; } },
  signal: { get: function (this: Lazy) { return this[SIGNAL]; } },
  headers: { get: function (this: Lazy) { return (this[HEADERS] ??= headersOf(this[SOURCE].rawHeaders)); } },
  bodyUsed: { get: function (this: Lazy) { return this[NATIVE] ? this[NATIVE].bodyUsed : Boolean(this[READ]); } },
  arrayBuffer: { value: async function (this: Lazy) { return this[NATIVE] ? this[NATIVE].arrayBuffer() : arrayBufferOf(await wholeBody(this)); } },
  // The bytes as they came off the socket (a view, not a copy: under Node a buffer of over 64 bytes
  // costs 1-4 µs to make), without an async frame of its own.
  bytes: { value: function (this: Lazy) { return this[NATIVE] ? this[NATIVE].bytes() : wholeBody(this).then(viewOf); } },
  text: { value: async function (this: Lazy) { return this[NATIVE] ? this[NATIVE].text() : utf8.decode(await wholeBody(this)); } },
  json: { value: async function (this: Lazy) { return JSON.parse(await this.text()); } },
};

const prototype: object = Object.create(Request.prototype, direct);
for (const key of Object.getOwnPropertyNames(Request.prototype)) {
  if (key === "constructor" || key in direct) continue;
  const descriptor = Object.getOwnPropertyDescriptor(Request.prototype, key)!;
  if (descriptor.get) Object.defineProperty(prototype, key, { get: function (this: Lazy) { return Reflect.get(Request.prototype, key, native(this)); } });
  else if (typeof descriptor.value === "function") {
    const method = descriptor.value as (...args: unknown[]) => unknown;
    Object.defineProperty(prototype, key, { value: function (this: Lazy, ...args: unknown[]) { return method.apply(native(this), args); } });
  }
}

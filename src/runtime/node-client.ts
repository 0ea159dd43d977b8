import { request as httpRequest, type Agent as HttpAgent, type IncomingHttpHeaders } from "node:http";
import { pipeline, Readable } from "node:stream";
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib";
import { pacedReader, readWhole } from "./paced-stream.ts";
import { failedReader, type ChunkReader } from "./chunks.ts";
import { LightResponse, NULL_BODY, type BodySource } from "./node-response.ts";
import { listenForAbort } from "./abort-listener.ts";

// A fetch for the calls we make (the photo service, the runners), over a transport of our own
// (undici's dispatch API, undici-send.ts; node:http's client for Deno's runner calls and Node's that
// close their connection) rather
// than over undici's fetch: the fetch spec's machinery (a Request, its body and signal steps, a fetch
// controller per call) cost Node 2-3x the CPU of the call itself (a 50-photo album: about 330 vs
// 95-125 µs per call, same run). It does what our calls ask of fetch: method, headers, a whole
// body, a signal, no redirects followed (each is one call), a compressed answer inflated as far as
// it is read; the answer is a light Response (node-response.ts): read whole straight from the
// socket, or as a web stream that reads from it only as it is read.

type Init = RequestInit & { duplex?: string };
/** A call as the transport takes it: origin and path apart, the headers flat. */
export type Call = { origin: string; path: string; method: string; headers: Record<string, string>; body: Uint8Array | string | undefined; signal: AbortSignal | undefined };
/**
 * What the transport answers: status, headers (node:http's shape) and the body, as a Node stream
 * (node:http's client) or read by the transport itself (undici-send.ts: it follows the call's
 * signal and fails as fetch does on its own).
 */
export type Answer = { status: number; headers: IncomingHttpHeaders | RawHeaders; body: Readable | BodySource };

/** Headers as node:http's `rawHeaders` has them: name, value, name, value..., names as sent. */
type RawHeaders = string[];

/** A fetch over `send`; rejects as fetch does (a TypeError with the cause, or the signal's reason). */
export function callFetch(send: (call: Call) => Promise<Answer>): typeof fetch {
  return (async (input: RequestInfo | URL, init: Init = {}) => {
    const { origin, path } = typeof input === "string" ? target(input) : input instanceof URL ? targetOf(input) : target(input.url);
    const call: Call = {
      origin,
      path,
      method: init.method ?? "GET",
      headers: flatHeaders(init.headers),
      body: isWhole(init.body) ? (init.body ?? undefined) : await wholeBody(init.body),
      signal: init.signal ?? undefined,
    };
    call.signal?.throwIfAborted();
    let answer: Answer;
    try {
      answer = await send(call);
    } catch (error) {
      if (call.signal?.aborted) throw call.signal.reason;
      throw new TypeError("fetch failed", { cause: error });
    }
    return webResponse(answer, call.signal);
  }) as typeof fetch;
}

/** Whether a call asks for its connection to be closed after its answer (`Connection: close`, any case). */
export function closesConnection({ headers }: Call): boolean {
  for (const name in headers) if (name.length === 10 && name.toLowerCase() === "connection") return headers[name]!.trim().toLowerCase() === "close";
  return false;
}

/** Where a call goes: origin, and path with its query. */
type Target = { origin: string; path: string };

const targetOf = (url: URL): Target => ({ origin: url.origin, path: url.pathname + url.search });

// Parsed once per URL: a runner's calls go to a handful of them, and a parsed URL was among the
// larger objects each call made (bench:runtimes). Bounded, for the photo service's many albums.
const targets = new Map<string, Target>();
const TARGETS_KEPT = 256;

function target(input: string): Target {
  let known = targets.get(input);
  if (known) return known;
  known = targetOf(new URL(input));
  if (targets.size >= TARGETS_KEPT) targets.clear();
  targets.set(input, known);
  return known;
}

/**
 * node:http's client with `agent`, to `socketPath` when given: Deno's calls to its runners (Deno's
 * own fetch sends absolute-form request targets over a Unix socket, which llama-server answers 404),
 * and Node's that close their connection (src/runtime/node.ts).
 * Not for the photo service: under Deno it too sends a request again on a reset reused connection.
 */
export const nodeHttpSend =
  (agent: HttpAgent, socketPath?: string) =>
  ({ origin, path, method, headers, body, signal }: Call): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const url = new URL(origin);
      const target = socketPath ? { socketPath } : { host: url.hostname, port: url.port };
      // The signal is watched here, not handed to node:http: under Deno neither that option nor a
      // destroy ends a call whose server went silent, so a hung runner's health check never
      // ended. It rejects at once. Once the answer has come, webResponse watches it for the body.
      const onAbort = () => (reject(signal?.reason), call.destroy());
      const call = httpRequest({ ...target, agent, method, path, headers }, (response) => {
        signal?.removeEventListener("abort", onAbort);
        // Its raw list, not `headers`: that object is built on first read, a keyed store per header.
        resolve({ status: response.statusCode ?? 502, headers: response.rawHeaders, body: response });
      });
      if (signal) listenForAbort(signal, onAbort);
      call.once("error", (error) => (signal?.removeEventListener("abort", onAbort), reject(error)));
      call.end(body);
    });

function flatHeaders(headers: HeadersInit | undefined): Record<string, string> {
  if (!headers) return {};
  if (headers instanceof Headers || Array.isArray(headers)) return Object.fromEntries(headers);
  return headers as Record<string, string>;
}

/** A body the transport takes as it is (awaited only when it is not: a turn per call). */
const isWhole = (body: BodyInit | null | undefined): body is Uint8Array<ArrayBuffer> | string | null | undefined =>
  body === undefined || body === null || typeof body === "string" || body instanceof Uint8Array;

async function wholeBody(body: BodyInit): Promise<Uint8Array> {
  return new Uint8Array(await new Response(body).arrayBuffer());
}

const INFLATERS: Record<string, () => NodeJS.ReadWriteStream> = { gzip: createGunzip, "x-gzip": createGunzip, deflate: createInflate, br: createBrotliDecompress };

/** Answer headers as name-value pairs, names in lower case (as node:http's and undici's objects have them). */
function pairsOf(headers: Answer["headers"]): [string, string][] {
  const pairs: [string, string][] = [];
  if (Array.isArray(headers)) {
    for (let i = 0; i < headers.length; i += 2) pairs.push([headers[i]!.toLowerCase(), headers[i + 1]!]);
    return pairs;
  }
  for (const name in headers) {
    const value = headers[name];
    if (Array.isArray(value)) for (const each of value) pairs.push([name, each]);
    else if (value !== undefined) pairs.push([name, value]);
  }
  return pairs;
}

function webResponse({ status, headers, body }: Answer, signal: AbortSignal | undefined): Response {
  const pairs = pairsOf(headers);
  if (!(body instanceof Readable)) return LightResponse.streamed(body, { status, headers: pairs });
  if (NULL_BODY.has(status)) {
    body.resume();
    return new LightResponse(null, { status, headers: pairs }) as unknown as Response;
  }
  const encoding = pairs.find(([name]) => name === "content-encoding")?.[1];
  const inflate = typeof encoding === "string" ? INFLATERS[encoding.trim().toLowerCase()] : undefined;
  const source = inflate ? (pipeline(body, inflate(), () => {}) as unknown as Readable) : body;
  return LightResponse.streamed(bodySource(source, body, signal), { status, headers: pairs });
}

/** What a body's reader gets when the body fails, as fetch has it: the signal's reason, or "terminated". */
export const bodyFailure = (signal: AbortSignal | undefined) => (error: Error) =>
  signal?.aborted ? signal.reason : new TypeError("terminated", { cause: error });

/**
 * `source` read whole, or chunk by chunk (by a reader, or a web stream on it) only as its reader asks
 * (so an inflated body grows only as far as it is read). The call's signal, or cancelling it, destroys
 * `socketSide`, which ends the call (a runner cancels a generation whose connection closes).
 */
function bodySource(source: Readable, socketSide: Readable, signal: AbortSignal | undefined): BodySource {
  const onAbort = () => socketSide.destroy(signal?.reason);
  if (signal) listenForAbort(signal, onAbort);
  const settled = () => signal?.removeEventListener("abort", onAbort);
  const failure = bodyFailure(signal);
  // Heard from the start, read or not: an unheard stream error would end the process.
  let failed: Error | undefined;
  source.once("error", (error) => ((failed = error), settled()));
  const reader = (): ChunkReader => {
    if (failed) return failedReader(failure(failed));
    return pacedReader(source, {
      settled,
      failure,
      cancel(reason) {
        settled();
        socketSide.destroy();
        if (source !== socketSide) source.destroy(reason instanceof Error ? reason : undefined);
      },
    });
  };
  return {
    whole: () => (failed ? Promise.reject(failure(failed)) : readWhole(source).then((bytes) => (settled(), bytes), (error: Error) => Promise.reject(failure(error)))),
    reader,
  };
}

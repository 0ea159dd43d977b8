import { lookup as systemLookup, type LookupAddress } from "node:dns";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import type { LookupFunction, Socket } from "node:net";
import { badRequest, type HttpError } from "../../http/errors.ts";
import { isAddress, isPublicAddress } from "./address.ts";
import type { MediaKind, MediaRef } from "./refs.ts";

// Remote media (when ALLOW_REMOTE_MEDIA is on) are fetched here, not by llama-server: its fetch
// resolves names itself and reaches whatever they point at. Here a name is resolved once, every
// address it gives is judged, the connection goes to a judged address (no second resolution for
// a DNS rebinding to answer differently), and the socket's remote address is judged again once
// connected. Redirects are not followed. Each value then goes on to llama-server as a data: URL,
// so that it never fetches anything itself.

/** Resolves a name to all its addresses (the system resolver's `lookup` with `all`). */
export type Resolve = (hostname: string, done: (error: Error | null, addresses: LookupAddress[]) => void) => void;

export type MediaFetchOptions = {
  /** The most bytes all remote media of one request may take together. */
  maxBytes: number;
  /** The time all remote media of one request may take together. */
  timeoutMs: number;
  resolve?: Resolve;
  /** Which addresses may be connected to; default: public ones only. */
  isAllowed?: (address: string) => boolean;
};

/** Replaces each remote media value of `refs` by a data: URL of what its URL answers. */
export type MediaInliner = (refs: MediaRef[], signal: AbortSignal) => Promise<void>;

const systemResolve: Resolve = (hostname, done) => systemLookup(hostname, { all: true, verbatim: true }, done);

const refused = (why: string) => badRequest("media_not_allowed", `media URL refused: ${why}`);
const failed = (url: URL, why: string) => badRequest("media_fetch_failed", `media URL ${url.origin}${url.pathname} could not be fetched: ${why}`);

export function createMediaInliner(options: MediaFetchOptions): MediaInliner {
  const settings = { resolve: systemResolve, isAllowed: isPublicAddress, ...options };
  return async (refs, signal) => {
    const call = new AbortController();
    const onAbort = () => call.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(() => call.abort(), settings.timeoutMs);
    let left = settings.maxBytes;
    try {
      for (const ref of refs) {
        const url = new URL(String(ref.holder[ref.key]));
        const media = await fetchOne(url, settings, left, call.signal);
        left -= media.bytes.byteLength;
        ref.holder[ref.key] = `data:${mediaType(media.contentType, ref.kind)};base64,${media.bytes.toString("base64")}`;
      }
    } finally {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
    }
  };
}

/** The MIME type for a data: URL: llama-server takes only image/, audio/ and video/ ones for media. */
function mediaType(contentType: string | undefined, kind: MediaKind): string {
  const type = contentType?.split(";")[0]?.trim().toLowerCase();
  if (type && (kind === "file" || type.startsWith(`${kind}/`))) return type;
  return kind === "file" ? "application/octet-stream" : `${kind}/octet-stream`;
}

type Fetched = { bytes: Buffer; contentType: string | undefined };
type Settings = Required<Omit<MediaFetchOptions, "maxBytes" | "timeoutMs">> & { maxBytes: number; timeoutMs: number };

/** One GET of `url` to a judged address, its body bounded by `maxBytes`. */
function fetchOne(url: URL, settings: Settings, maxBytes: number, signal: AbortSignal): Promise<Fetched> {
  return new Promise<Fetched>((resolve, reject) => {
    // Why the call ended early, if it was our decision; the request's own error says less.
    let reason: HttpError | undefined;
    const stop = (error: HttpError) => {
      reason ??= error;
      request.destroy(error);
    };
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (isAddress(host) && !settings.isAllowed(host)) return reject(refused(`${host} is not a public address`));
    const send = url.protocol === "https:" ? httpsRequest : httpRequest;
    const request = send(url, {
      method: "GET",
      agent: false,
      headers: { accept: "*/*", "user-agent": "llamadock" },
      lookup: judgedLookup(settings, (error) => (reason ??= error)),
    });
    request.once("socket", (socket: Socket) => {
      socket.once("connect", () => {
        const address = socket.remoteAddress ?? "";
        if (!settings.isAllowed(address)) stop(refused(`${url.hostname} connected to ${address}, not a public address`));
      });
    });
    const onAbort = () => stop(failed(url, signal.reason instanceof Error && signal.reason.name !== "AbortError" ? signal.reason.message : "it took too long, or the client went away"));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    request.once("close", () => signal.removeEventListener("abort", onAbort));
    request.once("error", (error) => reject(reason ?? failed(url, error.message)));
    request.once("response", (response) => readBounded(response, url, maxBytes, stop).then(resolve, reject));
    request.end();
  });
}

/** A `lookup` for node:http that resolves once and hands on only judged addresses. */
function judgedLookup(settings: Settings, refuse: (error: HttpError) => void): LookupFunction {
  return (hostname, options, done) => {
    settings.resolve(hostname, (error, addresses) => {
      if (error) return done(error, "");
      const bad = addresses.find((a) => !settings.isAllowed(a.address));
      if (bad || addresses.length === 0) {
        const error = refused(bad ? `${hostname} resolves to ${bad.address}, not a public address` : `${hostname} resolves to no address`);
        refuse(error);
        return done(error, "");
      }
      if (options.all) done(null, addresses);
      else done(null, addresses[0]!.address, addresses[0]!.family);
    });
  };
}

function readBounded(response: IncomingMessage, url: URL, maxBytes: number, stop: (error: HttpError) => void): Promise<Fetched> {
  return new Promise((resolve, reject) => {
    const status = response.statusCode ?? 0;
    const tooLarge = () => failed(url, `larger than the ${maxBytes} bytes left for this request's media`);
    if (status >= 300 && status < 400) return reject(stopped(stop, failed(url, `it redirects (HTTP ${status}); redirects are not followed`)));
    if (status < 200 || status >= 300) return reject(stopped(stop, failed(url, `it answered HTTP ${status}`)));
    if (Number(response.headers["content-length"]) > maxBytes) return reject(stopped(stop, tooLarge()));
    const chunks: Buffer[] = [];
    let size = 0;
    response.on("data", (chunk: Buffer) => {
      size += chunk.byteLength;
      if (size > maxBytes) return reject(stopped(stop, tooLarge()));
      chunks.push(chunk);
    });
    response.once("end", () => resolve({ bytes: Buffer.concat(chunks), contentType: response.headers["content-type"] }));
    response.once("error", (error) => reject(failed(url, error.message)));
    response.once("close", () => response.complete || reject(failed(url, "the connection was cut")));
  });
}

const stopped = (stop: (error: HttpError) => void, error: HttpError) => (stop(error), error);

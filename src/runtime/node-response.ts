// Under node:http (Node and Deno), the global Response is this lighter one: a Response made with a
// whole body (a string, bytes or nothing), as most answers are, or with a web stream or a chunk
// reader (a relayed answer, chunks.ts), keeps the body and its init as given, and node-exchange.ts
// writes them out directly; the native Response (its Headers, a web stream for the body, and a
// reader to get the bytes back out) is made only when a handler reads something else from it. The
// native one cost Node about as much CPU per answer as the rest of the adapter (bench:runtimes).
// It is a Response to `instanceof`, as @hono/node-server's is.

import { LightHeaders } from "./node-headers.ts";
import { fromReader, ownReader, streamOf, type ChunkReader } from "./chunks.ts";

const NativeResponse = globalThis.Response;

type Whole = string | Uint8Array | ArrayBuffer | null | undefined;
const isWhole = (body: unknown): body is Whole =>
  body === null || body === undefined || typeof body === "string" || body instanceof Uint8Array || body instanceof ArrayBuffer;

/**
 * A body still on its way (an answer to one of our calls, node-client.ts): read whole straight from
 * its source, or chunk by chunk by a reader of its own (a web stream is made on that reader only
 * when asked for). One of them is asked for, once.
 */
export type BodySource = { whole(): Promise<Uint8Array>; reader(): ChunkReader };

/** What node-exchange.ts writes for a light Response that nobody turned native. */
export type WholeAnswer = { status: number; headers: string[]; body: Uint8Array | string | undefined };
export type StreamedAnswer = { status: number; headers: string[]; body: ChunkReader };

const TEXT = "text/plain;charset=UTF-8";
// As fetch decodes a body: a byte order mark dropped, a bad sequence replaced.
export const utf8 = new TextDecoder();

/** Statuses whose answers have no body. */
export const NULL_BODY = new Set([101, 204, 205, 304]);

/** The bytes of `view` as an ArrayBuffer of their own (the view's own buffer when it spans it all). */
export function arrayBufferOf(view: Uint8Array): ArrayBuffer {
  if (view.byteOffset === 0 && view.byteLength === view.buffer.byteLength) return view.buffer as ArrayBuffer;
  return view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength) as ArrayBuffer;
}
const encoder = new TextEncoder();

/** Init headers as node:http's flat list (name, value, name, value...), without making a Headers. */
function flatOf(headers: HeadersInit | undefined): string[] {
  if (!headers) return [];
  if (Array.isArray(headers) || headers instanceof Headers) return LightHeaders.flatList(headers as Iterable<[string, string]>);
  const flat: string[] = [];
  for (const name in headers) flat.push(name, (headers as Record<string, string>)[name]!);
  return flat;
}

/** Whether a flat list has a header named `wanted` (lowercase), in any case. */
function hasName(flat: string[], wanted: string): boolean {
  for (let i = 0; i < flat.length; i += 2) if (flat[i]!.toLowerCase() === wanted) return true;
  return false;
}

/** Init headers as name-value pairs, without making a Headers. */
function pairsOf(headers: HeadersInit | undefined): [string, string][] {
  if (!headers) return [];
  if (Array.isArray(headers)) return headers.map(([name, value]) => [name!, value!]);
  if (headers instanceof Headers) return [...headers];
  return Object.entries(headers);
}

export class LightResponse {
  #body: Whole;
  /** A body given as a web stream (a relayed answer): handed on as it is, never wrapped in a native Response for its writer. */
  #stream: ReadableStream<Uint8Array> | undefined;
  /** A body given as a chunk reader (chunks.ts): read as it is by its writer, made a web stream only for others. */
  #reader: ChunkReader | undefined;
  #init: ResponseInit | undefined;
  #headers: Headers | undefined;
  #native: Response | undefined;
  #source: BodySource | undefined;
  #used = false;

  constructor(body?: BodyInit | null, init?: ResponseInit) {
    const status = init?.status ?? 200;
    const kept = isWhole(body) || (body instanceof ReadableStream && !body.locked);
    // Whatever the native one refuses (a bad status, a body on a null-body status), it refuses now.
    if (!kept || status < 200 || status > 599 || (body != null && NULL_BODY.has(status))) {
      this.#native = new NativeResponse(body, init);
    } else if (body instanceof ReadableStream) {
      this.#stream = body;
      this.#init = init;
    } else {
      this.#body = body;
      this.#init = init;
    }
  }

  static json(data: unknown, init?: ResponseInit): Response {
    const headers = pairsOf(init?.headers);
    if (!headers.some(([name]) => name.toLowerCase() === "content-type")) headers.push(["content-type", "application/json"]);
    return new LightResponse(JSON.stringify(data), { ...init, headers }) as unknown as Response;
  }

  /** An answer whose body is still arriving from `source`. */
  static streamed(source: BodySource, init: ResponseInit): Response {
    const response = new LightResponse(null, init);
    response.#source = source;
    return response as unknown as Response;
  }

  /** An answer whose body is `reader`'s chunks (chunks.ts's readerResponse). */
  static [fromReader](reader: ChunkReader, init: ResponseInit): Response {
    const response = new LightResponse(null, init);
    response.#reader = reader;
    return response as unknown as Response;
  }

  /** The body's chunks without a web stream: a body still arriving, or given as a reader (once). */
  [ownReader](): ChunkReader | undefined {
    if (this.#native || this.#used) return undefined;
    const reader = this.#reader ?? this.#source?.reader();
    if (reader) [this.#used, this.#reader] = [true, undefined];
    return reader;
  }

  /** A native Response is one too (a runtime's own fetch answers with those). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return value instanceof NativeResponse;
  }

  static error = () => NativeResponse.error();
  static redirect = (url: string | URL, status?: number) => NativeResponse.redirect(url, status);

  /** The native Response, made once from the body and init as given (its body used if this one's was). */
  #made(): Response {
    if (this.#native) return this.#native;
    const headers = this.#headers ?? this.#init?.headers;
    // A body read already (or taken by its reader) goes as it was given, or as none: it cannot be had twice.
    const body = this.#used ? this.#body : this.#source ? streamOf(this.#source.reader()) : (this.#streamBody() ?? this.#body);
    this.#native = new NativeResponse(body as BodyInit | null | undefined, { ...this.#init, headers });
    if (this.#used) this.#native.arrayBuffer().catch(() => {});
    return this.#native;
  }

  /** `response` as given, if it is a light one still whole that nobody read; else undefined. */
  static wholeOf(response: Response): WholeAnswer | undefined {
    return #body in response ? (response as unknown as LightResponse).#whole() : undefined;
  }

  /** `response`'s parts, if it is a light one with a web stream or a reader for body (node-exchange.ts writes it out without a native Response). */
  static streamOf(response: Response): StreamedAnswer | undefined {
    return #body in response ? (response as unknown as LightResponse).#streamed() : undefined;
  }

  #streamed(): StreamedAnswer | undefined {
    if (this.#native || this.#used || !(this.#stream || this.#reader)) return undefined;
    const body = this.#reader ?? this.#stream!.getReader();
    [this.#used, this.#reader] = [true, undefined];
    return { status: this.status, headers: flatOf(this.#headers ?? this.#init?.headers), body };
  }

  /** A reader given as body, made the web stream that others read (once). */
  #streamBody(): ReadableStream<Uint8Array> | undefined {
    if (this.#reader) [this.#stream, this.#reader] = [streamOf(this.#reader), undefined];
    return this.#stream;
  }

  #whole(): WholeAnswer | undefined {
    if (this.#native || this.#used || this.#source || this.#stream || this.#reader) return undefined;
    const body = this.#body;
    const headers = flatOf(this.#headers ?? this.#init?.headers);
    if (typeof body === "string" && !this.#headers && !hasName(headers, "content-type")) headers.push("content-type", TEXT);
    return { status: this.status, headers, body: body instanceof ArrayBuffer ? new Uint8Array(body) : (body ?? undefined) };
  }

  get status(): number {
    return this.#native ? this.#native.status : (this.#init?.status ?? 200);
  }
  get statusText(): string {
    return this.#native ? this.#native.statusText : (this.#init?.statusText ?? "");
  }
  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }
  get headers(): Headers {
    if (this.#native) return this.#native.headers;
    if (this.#headers) return this.#headers;
    const headers = new Headers(this.#init?.headers);
    if (typeof this.#body === "string" && !headers.has("content-type")) headers.set("content-type", TEXT);
    return (this.#headers = headers);
  }

  // Reading the body whole needs no native Response either.
  /**
   * The body's bytes, or undefined where only the native Response can tell them. A body still
   * arriving is read by #fromSource; here it can only be one already read (refused as such).
   */
  async #bytes(): Promise<string | Uint8Array | undefined> {
    const body = this.#body;
    if (this.#native || !(this.#source || typeof body === "string" || body instanceof Uint8Array)) return undefined;
    if (this.#used) throw new TypeError("Body is unusable: Body has already been read");
    this.#used = true;
    return body as string | Uint8Array;
  }
  /**
   * A body still arriving, read whole straight from its source (undefined for any other body):
   * the common read of an answer to one of our calls goes without an async frame of ours around it.
   */
  #fromSource(): Promise<Uint8Array> | undefined {
    if (!this.#source || this.#native || this.#used) return undefined;
    this.#used = true;
    return this.#source.whole();
  }
  text(): Promise<string> {
    return this.#fromSource()?.then((bytes) => utf8.decode(bytes)) ?? this.#text();
  }
  async #text(): Promise<string> {
    const bytes = await this.#bytes();
    if (bytes === undefined) return this.#made().text();
    return typeof bytes === "string" ? bytes : utf8.decode(bytes);
  }
  async json(): Promise<unknown> {
    return JSON.parse(await this.text());
  }
  async arrayBuffer(): Promise<ArrayBuffer> {
    return arrayBufferOf(await this.bytes());
  }
  /** The bytes as read, not copied into an ArrayBuffer of their own (as arrayBuffer() must). */
  bytes(): Promise<Uint8Array<ArrayBuffer>> {
    return (this.#fromSource() as Promise<Uint8Array<ArrayBuffer>> | undefined) ?? this.#otherBytes();
  }
  async #otherBytes(): Promise<Uint8Array<ArrayBuffer>> {
    const bytes = await this.#bytes();
    if (bytes === undefined) return new Uint8Array(await this.#made().arrayBuffer());
    return (typeof bytes === "string" ? encoder.encode(bytes) : bytes) as Uint8Array<ArrayBuffer>;
  }
  async blob(): Promise<Blob> {
    return this.#made().blob();
  }
  async formData(): Promise<FormData> {
    return this.#made().formData();
  }
  get body(): ReadableStream<Uint8Array> | null {
    if (this.#native) return this.#native.body;
    // A body still arriving (a runner's stream, relayed) becomes its web stream, and no more.
    if (this.#source && !this.#used) [this.#stream, this.#source] = [streamOf(this.#source.reader()), undefined];
    return this.#streamBody() ?? this.#made().body;
  }
  get bodyUsed(): boolean {
    return this.#native ? this.#native.bodyUsed : this.#used || (this.#stream?.locked ?? false);
  }
  get type(): ResponseType {
    return this.#made().type;
  }
  get url(): string {
    return this.#made().url;
  }
  get redirected(): boolean {
    return this.#made().redirected;
  }
  clone(): Response {
    return this.#made().clone();
  }
}

Object.setPrototypeOf(LightResponse.prototype, NativeResponse.prototype);
Object.setPrototypeOf(LightResponse, NativeResponse);

/** Makes the global Response and Headers the light ones (once; idempotent). */
export function useLightWebTypes(): void {
  if (globalThis.Response !== (LightResponse as unknown as typeof Response)) {
    Object.defineProperty(globalThis, "Response", { value: LightResponse, writable: true, configurable: true });
  }
  if (globalThis.Headers !== (LightHeaders as unknown as typeof Headers)) {
    Object.defineProperty(globalThis, "Headers", { value: LightHeaders, writable: true, configurable: true });
  }
}

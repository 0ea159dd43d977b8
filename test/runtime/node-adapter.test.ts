import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { request as httpRequest } from "node:http";
import { connect } from "node:net";
import { once } from "node:events";
import { until } from "../support/until.ts";
import { nodeRuntime } from "../../src/runtime/node.ts";
import { LightResponse, useLightWebTypes } from "../../src/runtime/node-response.ts";
import { bodyReader, ChunkQueue, readerResponse } from "../../src/runtime/chunks.ts";
import type { Listener } from "../../src/runtime/types.ts";

// The Node/Deno adapter's light Request and Response (node-request.ts, node-response.ts), through
// a real node:http server in this process: whatever a handler reads of them, it gets what the
// native classes would give; whatever it does not read is never made.

const NativeResponse = globalThis.Response;
const BIG_CHUNK = 64 * 1024;
const BIG_CHUNKS = 512;
let endlessCancelled = false;
let bigChunksMade = 0;
let listener: Listener;
let base: string;

/** Echoes what the handler saw of its request, per path. */
async function handler(request: Request): Promise<Response> {
  const path = new URL(request.url).pathname;
  if (path === "/json") {
    const body = (await request.json()) as object;
    return Response.json({ body, method: request.method, header: request.headers.get("x-said"), isRequest: request instanceof Request, used: request.bodyUsed });
  }
  if (path === "/stream-body") {
    // The body as a stream: the native Request is made, and reads from the socket.
    const chunks: string[] = [];
    const decoder = new TextDecoder();
    const reader = request.body!.getReader();
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) chunks.push(decoder.decode(chunk.value, { stream: true }));
    return new Response(chunks.join(""), { status: 201 });
  }
  if (path === "/headers-later") {
    const response = new Response("later", { headers: { "x-first": "1" } });
    response.headers.set("x-second", "2");
    return response;
  }
  if (path === "/stream-answer") {
    // An answer written as it is made (a relayed stream): its chunks as they come, no length.
    const encoder = new TextEncoder();
    const parts = ["data: one\n\n", "data: two\n\n", "data: [DONE]\n\n"];
    const stream = new ReadableStream<Uint8Array>({
      async pull(controller) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        const part = parts.shift();
        if (part === undefined) controller.close();
        else controller.enqueue(encoder.encode(part));
      },
    });
    return new Response(stream, { headers: { "content-type": "text/event-stream" } });
  }
  if (path === "/burst") {
    // A stream's last chunks and its end in one turn, after a wait (a runner's last events): corked
    // into one write, none may be lost.
    const encoder = new TextEncoder();
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode("first "));
        setTimeout(() => {
          for (const part of ["second ", "third ", "last"]) controller.enqueue(encoder.encode(part));
          controller.close();
        }, 20);
      },
    });
    return new Response(stream, { headers: { "content-type": "text/event-stream" } });
  }
  if (path === "/endless") {
    // An answer that produces on its own until cancelled: the client's leaving must cancel it.
    return new Response(
      new ReadableStream<Uint8Array>({
        async pull(controller) {
          await new Promise((resolve) => setTimeout(resolve, 5));
          controller.enqueue(new TextEncoder().encode("data: more\n\n"));
        },
        cancel() {
          endlessCancelled = true;
        },
      }),
      { headers: { "content-type": "text/event-stream" } },
    );
  }
  if (path === "/big") {
    // Far more than the socket buffers hold, made as it is read: a client that stops reading stops it.
    let made = 0;
    return new Response(
      new ReadableStream<Uint8Array>({
        pull(controller) {
          if (made === BIG_CHUNKS) return controller.close();
          bigChunksMade = ++made;
          controller.enqueue(new Uint8Array(BIG_CHUNK).fill(7));
        },
      }),
      { headers: { "content-type": "application/octet-stream" } },
    );
  }
  if (path === "/bytes") {
    // The body's own bytes (a view of what came off the socket): exactly the body, as a plain Uint8Array.
    const bytes = await request.bytes();
    return Response.json({ text: new TextDecoder().decode(bytes), length: bytes.length, plain: bytes.constructor === Uint8Array });
  }
  if (path === "/native") return new NativeResponse("from the native class", { headers: { "x-native": "yes" } });
  if (path === "/empty") return new Response(null, { status: 204 });
  return new Response("not found", { status: 404 });
}

function call(path: string, init: { method?: string; body?: string; headers?: Record<string, string>; chunked?: string[] } = {}) {
  return new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }>((resolve, reject) => {
    const url = new URL(path, base);
    const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: init.method ?? "GET", headers: init.headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, text }));
    });
    req.on("error", reject);
    for (const piece of init.chunked ?? []) req.write(piece);
    req.end(init.body);
  });
}

/** The handler as served: one path throws before any promise (a bug of ours), the rest as `handler`. */
const served = (request: Request): Promise<Response> => {
  if (new URL(request.url).pathname === "/throws") throw new Error("a bug");
  return handler(request);
};

beforeAll(async () => {
  listener = await nodeRuntime.serve(served, { kind: "tcp", hostname: "127.0.0.1", port: 0 }, { headersTimeoutMs: 5_000, bodyIdleTimeoutMs: 5_000, maxConnections: 16, overloaded: () => new Response("overloaded", { status: 503 }), stalledBody: () => new Error("body stalled") });
  base = listener.address;
});
afterAll(async () => {
  await listener.close(1_000);
});

/** A reader of one chunk, `text`, and its end. */
function queueOf(text: string): ChunkQueue {
  const queue = new ChunkQueue({ pause() {}, resume() {}, cancel() {} });
  queue.push(new TextEncoder().encode(text));
  queue.end();
  return queue;
}

describe("through node:http", () => {
  it("a handler reads method, headers and a whole JSON body from a Request that is instanceof Request", async () => {
    const answer = await call("/json", { method: "POST", body: '{"a":1}', headers: { "content-type": "application/json", "x-said": "hi" } });
    expect(answer.status).toBe(200);
    expect(answer.headers["content-type"]).toBe("application/json");
    expect(answer.headers["content-length"]).toBe(String(Buffer.byteLength(answer.text)));
    expect(JSON.parse(answer.text)).toEqual({ body: { a: 1 }, method: "POST", header: "hi", isRequest: true, used: true });
  });

  it("a body read as bytes is the body's bytes alone, whether it came with its headers or in pieces", async () => {
    const whole = await call("/bytes", { method: "POST", body: '{"a":"é"}', headers: { "content-type": "application/json" } });
    expect(JSON.parse(whole.text)).toEqual({ text: '{"a":"é"}', length: 10, plain: true });
    const pieces = await call("/bytes", { method: "POST", chunked: ["one ", "two"] });
    expect(JSON.parse(pieces.text)).toEqual({ text: "one two", length: 7, plain: true });
  });

  it("a handler that throws at once gets the internal error, and the server serves on", async () => {
    const failed = await call("/throws");
    expect([failed.status, JSON.parse(failed.text).error.code]).toEqual([500, "internal_error"]);
    expect((await call("/json", { method: "POST", body: "{}" })).status).toBe(200);
  });

  it("a body read as a stream, sent in chunks with no length, arrives whole", async () => {
    const answer = await call("/stream-body", { method: "POST", chunked: ["one ", "two ", "three"] });
    expect(answer).toMatchObject({ status: 201, text: "one two three" });
    expect(answer.headers["content-type"]).toBe("text/plain;charset=UTF-8");
  });

  it("a body with a length is read whole whether it came with its headers or later, and the connection serves the next request", async () => {
    const { port, hostname } = new URL(base);
    const socket = connect(Number(port), hostname);
    await once(socket, "connect");
    let received = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => (received += chunk));
    const head = (body: string) => `POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    // The first body after a pause (read as it comes), the second with its headers (taken from the buffer).
    const late = '{"late":"yes"}';
    socket.write(head(late) + late.slice(0, 5));
    await new Promise((resolve) => setTimeout(resolve, 50));
    socket.write(late.slice(5));
    const early = '{"early":"yes"}';
    socket.write(head(early) + early);
    await until(() => (received.match(/HTTP\/1\.1 200/g) ?? []).length === 2, "both answers");
    socket.end();
    expect(received).toContain('"body":{"late":"yes"}');
    expect(received).toContain('"body":{"early":"yes"}');
  });

  it("an answer whose body is a web stream goes out chunk by chunk, without a length, whole", async () => {
    const answer = await call("/stream-answer");
    expect(answer).toMatchObject({ status: 200, text: "data: one\n\ndata: two\n\ndata: [DONE]\n\n" });
    expect(answer.headers).toMatchObject({ "content-type": "text/event-stream", "transfer-encoding": "chunked" });
    expect(answer.headers["content-length"]).toBeUndefined();
  });

  it("an answer's last chunks and its end, come together, arrive whole (the socket corked for them)", async () => {
    expect(await call("/burst")).toMatchObject({ status: 200, text: "first second third last" });
  });

  it("a body in one piece goes out with its length, not chunked, even from a native Response", async () => {
    const native = await call("/native");
    expect(native.headers["content-length"]).toBe(String("from the native class".length));
    expect(native.headers["transfer-encoding"]).toBeUndefined();
  });

  it("a client that leaves mid-stream cancels the answer's body", async () => {
    endlessCancelled = false;
    const url = new URL("/endless", base);
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname }, (res) => {
        res.once("data", () => (req.destroy(), resolve()));
      });
      req.on("error", (error) => (req.destroyed ? undefined : reject(error)));
      req.end();
    });
    await until(() => endlessCancelled, "the body's cancel");
  });

  it("a client that stops reading stops the body's making; once it reads again, the body arrives whole", async () => {
    const url = new URL("/big", base);
    let received = 0;
    const done = new Promise<void>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname }, (res) => {
        res.pause();
        res.on("data", (chunk: Buffer) => (received += chunk.byteLength));
        res.once("end", resolve);
        // Paused until the making stands still (the socket's buffers full), then read to the end.
        let seen = -1;
        const settle = setInterval(() => {
          if (bigChunksMade === seen && seen > 0) return clearInterval(settle), stoodAt(seen), res.resume();
          seen = bigChunksMade;
        }, 300);
      });
      req.on("error", reject);
      req.end();
    });
    let stood = 0;
    const stoodAt = (made: number) => (stood = made);
    await done;
    expect(stood).toBeGreaterThan(0);
    expect(stood).toBeLessThan(BIG_CHUNKS);
    expect(received).toBe(BIG_CHUNK * BIG_CHUNKS);
  });

  it("headers set after the Response was made are sent; a native Response is sent as it is; a 204 has no body", async () => {
    expect((await call("/headers-later")).headers).toMatchObject({ "x-first": "1", "x-second": "2" });
    const native = await call("/native");
    expect(native).toMatchObject({ status: 200, text: "from the native class" });
    expect(native.headers["x-native"]).toBe("yes");
    expect(await call("/empty")).toMatchObject({ status: 204, text: "" });
  });
});

describe("the light Response", () => {
  it("is instanceof the native Response, and a native one is instanceof it", () => {
    const light = new LightResponse("x") as unknown as Response;
    expect(light).toBeInstanceOf(NativeResponse);
    expect(new NativeResponse("x")).toBeInstanceOf(LightResponse);
  });

  it("answers as the native one does: headers, status, a body read once", async () => {
    const light = new LightResponse("text", { status: 201, statusText: "Made" }) as unknown as Response;
    expect([light.status, light.statusText, light.ok, light.headers.get("content-type")]).toEqual([201, "Made", true, "text/plain;charset=UTF-8"]);
    expect(await light.text()).toBe("text");
    expect(light.bodyUsed).toBe(true);
    await expect(light.text()).rejects.toThrow(TypeError);
    const json = LightResponse.json({ a: 1 }, { status: 400 });
    expect([json.status, json.headers.get("content-type"), await json.json()]).toEqual([400, "application/json", { a: 1 }]);
  });

  it("refuses what the native one refuses, when it is made", () => {
    expect(() => new LightResponse("x", { status: 99 })).toThrow(RangeError);
    expect(() => new LightResponse("x", { status: 204 })).toThrow(TypeError);
  });

  it("keeps a web stream given as body as it is, and reads it as the native one would", async () => {
    const stream = () => new ReadableStream<Uint8Array>({ start: (c) => (c.enqueue(new TextEncoder().encode("streamed")), c.close()) });
    const given = stream();
    const light = new LightResponse(given, { status: 202, headers: { "x-a": "1" } }) as unknown as Response;
    expect([light.body === given, light.bodyUsed, light.status, light.headers.get("x-a")]).toEqual([true, false, 202, "1"]);
    const written = LightResponse.streamOf(light)!;
    expect(written).toMatchObject({ status: 202, headers: ["x-a", "1"] });
    expect([given.locked, light.bodyUsed, new TextDecoder().decode((await written.body.read()).value)]).toEqual([true, true, "streamed"]);
    expect(await (new LightResponse(stream()) as unknown as Response).text()).toBe("streamed");
    const locked = stream();
    locked.getReader();
    expect(() => new LightResponse(locked)).toThrow(TypeError);
    expect(() => new LightResponse(stream(), { status: 204 })).toThrow(TypeError);
  });

  it("hands on a body still arriving as its source's one stream, read as the native one would", async () => {
    let made = 0;
    const piece = () => new ReadableStream<Uint8Array>({ start: (c) => (c.enqueue(new TextEncoder().encode("piece")), c.close()) });
    const source = { whole: async () => new TextEncoder().encode("whole"), reader: () => (made++, piece().getReader()) };
    const light = LightResponse.streamed(source, { status: 200 });
    expect(light.body).toBe(light.body);
    expect([made, light.bodyUsed]).toEqual([1, false]);
    expect(await light.text()).toBe("piece");
    expect(light.bodyUsed).toBe(true);
  });

  it("hands on a body still arriving as its source's own reader, once, with no web stream made", async () => {
    let asked = 0;
    const own = queueOf("own");
    const source = { whole: async () => new Uint8Array(), reader: () => (asked++, own) };
    const light = LightResponse.streamed(source, { status: 200 });
    const reader = bodyReader(light)!;
    // The source's reader itself: no web stream around it.
    expect(reader).toBe(own);
    expect([asked, light.bodyUsed, bodyReader(light)]).toEqual([1, true, undefined]);
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("own");
  });

  it("keeps a reader given as body for its writer, and makes it a web stream for anyone else", async () => {
    useLightWebTypes(); // as serving through node:http does
    const answer = readerResponse(queueOf("relayed"), { status: 201, headers: { "x-b": "2" } });
    expect(answer).toBeInstanceOf(LightResponse);
    const written = LightResponse.streamOf(answer)!;
    expect([written.status, written.headers, new TextDecoder().decode((await written.body.read()).value)]).toEqual([201, ["x-b", "2"], "relayed"]);
    expect(LightResponse.streamOf(answer)).toBeUndefined();
    expect(await readerResponse(queueOf("read by a handler"), { status: 200 }).text()).toBe("read by a handler");
    expect(readerResponse(queueOf("x"), { status: 200 }).body).toBeInstanceOf(ReadableStream);
  });

  it("a body read as a stream makes the native Response, with the same bytes", async () => {
    const light = new LightResponse(new TextEncoder().encode("bytes")) as unknown as Response;
    const reader = light.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("bytes");
  });
});

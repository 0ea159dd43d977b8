import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type Server, type ServerResponse } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { gzipSync } from "node:zlib";
import { Agent } from "undici";
import { callFetch } from "../../src/runtime/node-client.ts";
import { undiciSend } from "../../src/runtime/undici-send.ts";
import { until } from "../support/until.ts";

// Node's calls on undici's dispatch API (undici-send.ts), through callFetch as the photo service
// and the runners use them, against a real node:http server in this process: a body read whole or
// as a stream that reads on only as it is read, an encoded body inflated, and a signal or a
// cancel that ends the call (its connection closed) wherever the call is.

const CHUNK = Buffer.alloc(64 * 1024, 0x61);
/** 32 MiB: several times what loopback sockets buffer. */
const FLOOD_CHUNKS = 512;
let server: Server;
let base: string;
const closed: string[] = [];
/** What the server has written of the current flood, in bytes. */
let flooded = 0;

/** Writes `count` chunks, as fast as the client reads them. */
function flood(response: ServerResponse, count: number): void {
  flooded = 0;
  response.writeHead(200, { "content-type": "application/octet-stream" });
  const write = () => {
    while (flooded < count * CHUNK.byteLength) {
      flooded += CHUNK.byteLength;
      if (!response.write(CHUNK)) return;
    }
    response.end();
  };
  response.on("drain", write);
  write();
}

beforeAll(async () => {
  server = createServer((request, response) => {
    response.on("close", () => closed.push(request.url!));
    if (request.url === "/json") return void response.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');
    if (request.url === "/echo") return void request.pipe(response);
    if (request.url === "/gzip") return void response.writeHead(200, { "content-encoding": "gzip" }).end(gzipSync("inflated"));
    if (request.url === "/flood") return flood(response, FLOOD_CHUNKS);
    if (request.url === "/silent") return; // never answers
    if (request.url === "/half") {
      response.writeHead(200, { "content-length": "100" });
      return void response.write("half of it"); // and nothing more
    }
    if (request.url === "/empty") return void response.writeHead(204).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const send = callFetch(undiciSend(new Agent()));

describe("undici's dispatch as our fetch", () => {
  it("answers status, headers and a body read whole; a body sent is received", async () => {
    const json = await send(`${base}/json`);
    expect([json.status, json.headers.get("content-type")]).toEqual([200, "application/json"]);
    expect(await json.json()).toEqual({ ok: true });
    const echoed = await send(`${base}/echo`, { method: "POST", body: "said", headers: { "content-type": "text/plain" } });
    expect(await echoed.text()).toBe("said");
    const empty = await send(`${base}/empty`);
    expect([empty.status, await empty.text()]).toEqual([204, ""]);
  });

  it("reads a large body as a stream only as it is read, and whole after a wait", async () => {
    const streamed = await send(`${base}/flood`);
    const reader = streamed.body!.getReader();
    await reader.read();
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Unread, the answer waits in the sockets' buffers: far less than its 32 MiB is written.
    expect(flooded).toBeLessThan(16 * 1024 * 1024);
    let bytes = 0;
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) bytes += chunk.value.byteLength;
    expect(bytes).toBeGreaterThanOrEqual((FLOOD_CHUNKS - 1) * CHUNK.byteLength);
    const late = await send(`${base}/flood`);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect((await late.arrayBuffer()).byteLength).toBe(FLOOD_CHUNKS * CHUNK.byteLength);
  });

  it("inflates an encoded body", async () => {
    expect(await (await send(`${base}/gzip`)).text()).toBe("inflated");
  });

  it("a signal ends a call before its answer, and in its body: fetch's errors, the connection closed", async () => {
    const before = new AbortController();
    const waiting = send(`${base}/silent`, { signal: before.signal });
    setTimeout(() => before.abort(new Error("gave up")), 50);
    await expect(waiting).rejects.toThrow("gave up");
    await until(() => closed.includes("/silent"), "the silent call's connection to close");

    const during = new AbortController();
    const half = await send(`${base}/half`, { signal: during.signal });
    const text = half.text();
    setTimeout(() => during.abort(new Error("enough")), 50);
    await expect(text).rejects.toThrow("enough");
    await until(() => closed.includes("/half"), "the half-answered call's connection to close");
  });

  it("a cancelled stream ends its call", async () => {
    closed.length = 0;
    const streamed = await send(`${base}/flood`);
    const reader = streamed.body!.getReader();
    await reader.read();
    await reader.cancel();
    await until(() => closed.includes("/flood"), "the flood's connection to close");
    expect(flooded).toBeLessThan(FLOOD_CHUNKS * CHUNK.byteLength);
  });

  it("a connection that fails midway fails the body with fetch's TypeError", async () => {
    const half = await send(`${base}/half`);
    const text = half.text();
    server.closeAllConnections();
    await expect(text).rejects.toThrow(TypeError);
  });

  it("an encoded answer whose connection breaks in the read that brought its headers fails its read, and nothing else", async () => {
    // The headers and a malformed chunk in one packet: undici's parser fails right after the headers.
    const broken = createTcpServer((socket) => {
      socket.once("data", () => {
        const encoding = brokenEncodings.shift();
        socket.end(`HTTP/1.1 200 OK\r\ncontent-encoding: ${encoding}\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n`);
      });
    });
    const brokenEncodings = ["gzip", "unheard-of"];
    await new Promise<void>((resolve) => broken.listen(0, "127.0.0.1", resolve));
    const at = `http://127.0.0.1:${(broken.address() as { port: number }).port}`;
    try {
      for (const _ of ["gzip", "unheard-of"]) {
        const answer = await send(`${at}/`).catch((error: unknown) => error);
        // Either the call fails, or its body does: never a hang, never an unheard error.
        if (answer instanceof Error) expect(answer).toBeInstanceOf(TypeError);
        else await expect((answer as Response).text()).rejects.toThrow(TypeError);
      }
    } finally {
      await new Promise((resolve) => broken.close(resolve));
    }
  });
});


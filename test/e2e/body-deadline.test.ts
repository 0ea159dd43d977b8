import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageModel } from "../../src/models/package/archive.ts";
import { ask } from "../support/http.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";

// A request body has an idle deadline, not a total one (HTTP_BODY_IDLE_TIMEOUT_MS, 2 s here), on
// every runtime: one that keeps arriving is taken however long it lasts (here 5 s, a chunk every
// 0.5 s), one that stops is answered 408 body_timeout and its connection closed (under Bun, a
// small one of declared length read whole has its connection closed unanswered), one nobody reads
// (an error answered first) has its connection closed once it goes silent; the server serves on.
// Regression: node:http (Node's and Deno's) cut every request still arriving after 300 s
// (requestTimeout), a large model archive midway; under Bun a body that stopped held its
// connection for ever.

const runtimes: RuntimeName[] = ["bun", "deno", "node"];
const IDLE_MS = 2_000;
const SLICES = 10;
const EVERY_MS = 500;

type Exchange = { head: string; body: string; closed: Promise<void> };

/**
 * Sends `slices` of a body on its own connection, `EVERY_MS` apart, chunked (or with its length
 * declared); it ends after the last unless `silentAfter` slices stop it early.
 */
function trickle(port: number, path: string, slices: Uint8Array[], options: { silentAfter?: number; declared?: boolean } = {}): Promise<Exchange> {
  const socket: Socket = connect(port, "127.0.0.1");
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.on("error", () => {});
  let received = "";
  socket.setEncoding("latin1");
  socket.on("data", (text: string) => (received += text));
  const length = slices.reduce((sum, slice) => sum + slice.byteLength, 0);
  const framing = options.declared ? `Content-Length: ${length}` : "Transfer-Encoding: chunked";
  socket.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n${framing}\r\n\r\n`);
  const sent = options.silentAfter ?? slices.length;
  let next = 0;
  const timer = setInterval(() => {
    if (socket.destroyed) return clearInterval(timer);
    if (next < sent) {
      const slice = slices[next++]!;
      if (options.declared) socket.write(slice);
      else socket.write(`${slice.byteLength.toString(16)}\r\n`), socket.write(slice), socket.write("\r\n");
    }
    if (next === slices.length && !options.declared) socket.write("0\r\n\r\n");
    if (next >= sent) clearInterval(timer);
  }, EVERY_MS);
  // The answer: a head and a body of the length it declares (or up to the connection's end).
  return new Promise((resolve, reject) => {
    const check = () => {
      const end = received.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = received.slice(0, end);
      const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? NaN);
      const body = Buffer.from(received.slice(end + 4), "latin1").toString("utf8");
      if (Buffer.byteLength(body) >= length) done({ head, body: body.slice(0, length), closed });
    };
    const done = (exchange: Exchange) => {
      socket.off("data", check);
      resolve(exchange); // the body goes on as it was to (an answer may come before it is read)
    };
    socket.on("data", check);
    void closed.then(() => (received.includes("\r\n\r\n") ? done({ head: received.slice(0, received.indexOf("\r\n\r\n")), body: "", closed }) : reject(new Error(`closed without an answer: ${JSON.stringify(received)}`))));
  });
}

/** `bytes` in `count` slices of about equal size. */
function slicesOf(bytes: Uint8Array, count: number): Uint8Array[] {
  const size = Math.ceil(bytes.byteLength / count);
  return Array.from({ length: count }, (_, i) => bytes.subarray(i * size, (i + 1) * size));
}

const statusOf = (head: string) => Number(head.split(" ")[1]);

// Concurrent, runtimes and tests alike: each test waits on the clock (a body trickling for seconds)
// on a connection of its own, and run one after another they took over 100 s of a run.
describe.concurrent.each(runtimes)("request bodies under %s", (runtime) => {
  let folder: string;
  let server: ServerProcess;
  let port: number;
  let archive: Uint8Array;

  beforeAll(async () => {
    folder = await mkdtemp(join(tmpdir(), "llamadock-body-deadline-"));
    const weights = join(folder, "tiny.gguf");
    await writeFile(weights, tinyLlamaGguf({ seed: 40 }));
    archive = new Uint8Array(await new Response((await packageModel({ weights: [weights] })).archive()).arrayBuffer());
    const models = join(folder, "models");
    server = await startServer({
      runtime,
      ...(runtime === "deno" ? { runtimeArgs: denoPermissions([`--allow-read=${folder},.`, `--allow-write=${folder}`, "--allow-sys=homedir,statfs"]) } : {}),
      env: { SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: "none", MODELS_PATH: models, HTTP_BODY_IDLE_TIMEOUT_MS: String(IDLE_MS) },
      ready: [/model runner service listening on http:\/\/[\d.]+:\d+/],
    });
    port = Number(/model runner service listening on http:\/\/[\d.]+:(\d+)/.exec(server.output())![1]);
  });
  afterAll(async () => {
    await server?.stop();
    await rm(folder, { recursive: true, force: true });
  });

  const servesAgain = async () => expect((await ask({ url: `http://127.0.0.1:${port}` }, "GET", "/models")).status).toBe(200);

  it("takes a model archive that keeps arriving for longer than the idle deadline (read as a stream)", async () => {
    const { head, body } = await trickle(port, "/models/load?tag=me/slow", slicesOf(archive, SLICES));
    expect([statusOf(head), JSON.parse(body).message]).toEqual([200, "Model loaded successfully"]);
    expect((await ask({ url: `http://127.0.0.1:${port}` }, "GET", "/models/me/slow")).status).toBe(200);
  });

  it.each([
    ["chunked", false],
    ["of declared length, past what Bun reads natively", true],
  ])("takes a JSON body (%s) that keeps arriving for longer than the idle deadline (read whole)", async (_, declared) => {
    const json = new TextEncoder().encode(JSON.stringify({ model: "me/absent", messages: [{ role: "user", content: "hi".repeat(declared ? 50_000 : 1) }] }));
    const { head, body } = await trickle(port, "/v1/chat/completions", slicesOf(json, SLICES), { declared });
    // Read to its end and parsed: the answer names the model the body asked for.
    expect(statusOf(head)).toBe(404);
    expect(JSON.parse(body).error.message).toContain("me/absent");
  });

  it.each([
    ["a model archive (read as a stream)", "/models/load?tag=me/stopped"],
    ["a JSON body (read whole)", "/v1/chat/completions"],
  ])("answers %s that stops arriving 408 body_timeout, closes its connection, and serves the next request", async (_, path) => {
    const bytes = path.startsWith("/models") ? archive : new TextEncoder().encode(JSON.stringify({ model: "me/absent", messages: [] }));
    const { head, body, closed } = await trickle(port, path, slicesOf(bytes, SLICES), { silentAfter: 3 });
    expect(statusOf(head)).toBe(408);
    expect(JSON.parse(body)).toEqual({ error: { message: `the request body stopped arriving for ${IDLE_MS / 1000} s`, type: "timeout_error", code: "body_timeout" } });
    await closed; // the rest of the body may never come: the connection goes (bounded by the test's timeout)
    await servesAgain();
    if (path.startsWith("/models")) expect((await ask({ url: `http://127.0.0.1:${port}` }, "GET", "/models/me/stopped")).status).toBe(404);
  });

  it.each([
    ["small (Bun: its connection closed unanswered)", 1],
    ["past what Bun reads natively", 50_000],
  ])("answers a JSON body of declared length, %s, that stops arriving 408 body_timeout", async (_, repeat) => {
    const json = new TextEncoder().encode(JSON.stringify({ model: "me/absent", messages: [{ role: "user", content: "hi".repeat(repeat) }] }));
    const exchange = trickle(port, "/v1/chat/completions", slicesOf(json, SLICES), { silentAfter: 3, declared: true });
    // Bun reads a small body whole natively (bun-body.ts), its own timer cutting one that stops.
    if (runtime === "bun" && repeat === 1) await expect(exchange).rejects.toThrow("closed without an answer");
    else {
      const { head, body, closed } = await exchange;
      expect([statusOf(head), JSON.parse(body).error.code]).toEqual([408, "body_timeout"]);
      await closed;
    }
    await servesAgain();
  });

  it("closes the connection of a body nobody reads once it stops arriving, and serves the next request", async () => {
    // No such route: answered 404 at once, before the body is read.
    const { head, closed } = await trickle(port, "/no/such/route", slicesOf(archive, SLICES), { silentAfter: 3 });
    expect(statusOf(head)).toBe(404);
    await closed;
    await servesAgain();
  });
});

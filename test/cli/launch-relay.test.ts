import { mkdtemp, rm } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRelay, type Relay } from "../../src/cli/launch/relay.ts";
import { startServer, type ServerProcess } from "../support/server-process.ts";

// `llamadock launch`'s relay (src/cli/launch/relay.ts) in front of a real model runner's Unix
// socket: the connections that have not shown the launch's token yet are bounded, by a deadline
// for their head and by how many may wait at once, while the agent's own connections, which show
// it at once, go through. Raw TCP connections, as a local user's would be.

let dir: string;
let runner: ServerProcess;
let relay: Relay;
const LIMITS = { headTimeoutMs: 1000, waitingMax: 4 };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-relay-"));
  runner = await startServer({
    runtime: "bun",
    env: { SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: join(dir, "runner.sock"), MODELS_PATH: join(dir, "models"), INFERENCE_RUNTIME_DIR: join(dir, "run"), INFERENCE_LOG_DIR: join(dir, "logs"), INFERENCE_SETTINGS_PATH: join(dir, "settings.json") },
    ready: [/model runner service listening on unix:/],
  });
  relay = await startRelay(join(dir, "runner.sock"), LIMITS);
}, 60_000);
afterAll(async () => {
  relay?.close();
  await runner?.stop(10_000);
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A raw connection to the relay: what it got back, and when it closed. */
function open(): { socket: Socket; received: () => string; closed: Promise<void> } {
  const socket = connect(Number(new URL(relay.url).port), "127.0.0.1");
  let text = "";
  socket.setEncoding("latin1");
  socket.on("data", (chunk: string) => (text += chunk));
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  return { socket, received: () => text, closed };
}

/** Resolves true once `closed` settles, false if it has not after `ms` (a bound on waiting, not a timing assertion). */
const closesWithin = (closed: Promise<void>, ms: number) => Promise.race([closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

const agentAsks = () => fetch(`${relay.url}/models`, { headers: { authorization: `Bearer ${relay.token}` } });

describe("the relay's connections that have not shown the token", () => {
  it("a connection that sends no head is answered 408 and closed at the deadline", async () => {
    const silent = open();
    expect(await closesWithin(silent.closed, 20 * LIMITS.headTimeoutMs)).toBe(true);
    expect(silent.received()).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n[\s\S]*"code":"header_timeout"/);
  });

  it("a head trickled a byte at a time is cut at the same deadline: it is a total one", async () => {
    const trickle = open();
    const head = "GET /models HTTP/1.1\r\nhost: 127.0.0.1\r\nx-padding: ";
    let i = 0;
    const timer = setInterval(() => trickle.socket.write(head[i++ % head.length]!), 50);
    try {
      expect(await closesWithin(trickle.closed, 20 * LIMITS.headTimeoutMs)).toBe(true);
    } finally {
      clearInterval(timer);
    }
    expect(trickle.received()).toMatch(/^HTTP\/1\.1 408 /);
  });

  it("past the ones that may wait at once, the oldest is closed, and the agent still gets through", async () => {
    const waiting = Array.from({ length: LIMITS.waitingMax + 2 }, () => open());
    // Each is accepted (a byte of a head sent) before the next is opened, so their order is known.
    for (const connection of waiting) {
      connection.socket.write("G");
      await new Promise((r) => setTimeout(r, 20));
    }
    // Before any deadline: the two oldest closed unanswered (a deadline's close answers 408), the others still open.
    const [first, second, third] = waiting;
    expect(await closesWithin(Promise.all([first!.closed, second!.closed]).then(() => {}), LIMITS.headTimeoutMs / 4)).toBe(true);
    expect([first!.received(), second!.received()]).toEqual(["", ""]);
    expect(await closesWithin(third!.closed, 10)).toBe(false);
    const answer = await agentAsks();
    expect(answer.status).toBe(200);
    expect(await answer.json()).toEqual([]);
    await Promise.all(waiting.map((c) => c.closed));
  });

  it("a wrong key is refused at once, and the right one is relayed on a kept-alive connection", async () => {
    // A connection of its own (the test's kept-alive ones showed the token already).
    const wrong = open();
    wrong.socket.write("GET /models HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer nope\r\n\r\n");
    await wrong.closed;
    expect(wrong.received()).toMatch(/^HTTP\/1\.1 401 Unauthorized\r\n[\s\S]*"code":"invalid_api_key"/);
    for (let i = 0; i < 3; i++) expect((await agentAsks()).status).toBe(200);
  });
});

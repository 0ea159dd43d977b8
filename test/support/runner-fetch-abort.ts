import { createServer } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { detectRuntime } from "../../src/runtime/index.ts";

// Run under Bun, Node or Deno by runner-fetch.test.ts: a runner on a Unix socket that sends its
// answer's headers and part of its body, then goes silent (as a hung runner does); the runtime's
// runner fetch is aborted once the headers are in, for a call that keeps its connection and for one
// sent with `Connection: close`. Prints how reading each body ended: forward.ts relies on that read
// failing with the signal's reason, without racing it.

const runtime = await detectRuntime();
const dir = mkdtempSync(join(tmpdir(), "llamadock-fetch-"));
const socketPath = join(dir, "runner.sock");
const runner = createServer((socket) => {
  socket.once("data", () => socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"content":'));
});
const fetchRunner = runtime.unixFetch(socketPath);
/** One call (`connection` its header, as a stream's call sends it, or none), aborted once its headers are in. */
async function abortedMidAnswer(connection?: string): Promise<{ status: number; outcome: string }> {
  const call = new AbortController();
  const headers: Record<string, string> = connection ? { connection } : {};
  const answer = await fetchRunner("http://runner/v1/completions", { method: "POST", headers, body: "{}", signal: call.signal });
  call.abort(new Error("the runner died"));
  const silence = new Promise<string>((resolve) => setTimeout(() => resolve("still waiting after 10 s"), 10_000));
  const outcome = await Promise.race([answer.bytes().then(() => "resolved", (error: Error) => `rejected: ${error.message}`), silence]);
  return { status: answer.status, outcome };
}
try {
  await new Promise<void>((resolve) => runner.listen(socketPath, resolve));
  // Node sends a call that closes its connection through another client (src/runtime/node.ts).
  console.log(JSON.stringify({ kept: await abortedMidAnswer(), closing: await abortedMidAnswer("close") }));
} finally {
  runner.close();
  rmSync(dir, { recursive: true, force: true });
}
runtime.exit(0);

import { createServer } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { detectRuntime } from "../../src/runtime/index.ts";

// Run under Bun, Node or Deno by runner-fetch.test.ts: a runner on a Unix socket that sends its
// answer's headers and part of its body, then goes silent (as a hung runner does); the runtime's
// runner fetch is aborted once the headers are in. Prints how reading the body ended: forward.ts
// relies on that read failing with the signal's reason, without racing it.

const runtime = await detectRuntime();
const dir = mkdtempSync(join(tmpdir(), "llamadock-fetch-"));
const socketPath = join(dir, "runner.sock");
const runner = createServer((socket) => {
  socket.once("data", () => socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"content":'));
});
try {
  await new Promise<void>((resolve) => runner.listen(socketPath, resolve));
  const call = new AbortController();
  const answer = await runtime.unixFetch(socketPath)("http://runner/v1/completions", { method: "POST", body: "{}", signal: call.signal });
  call.abort(new Error("the runner died"));
  const silence = new Promise<string>((resolve) => setTimeout(() => resolve("still waiting after 10 s"), 10_000));
  const outcome = await Promise.race([answer.bytes().then(() => "resolved", (error: Error) => `rejected: ${error.message}`), silence]);
  console.log(JSON.stringify({ status: answer.status, outcome }));
} finally {
  runner.close();
  rmSync(dir, { recursive: true, force: true });
}
runtime.exit(0);

import { request } from "node:http";
import { describe, expect, it } from "vitest";
import { startServer, type RuntimeName } from "../support/server-process.ts";

// A body's idle deadline measures the client's silence, not ours: a route that stops reading for
// longer than the deadline (a slow disk behind an upload) while the client, held back by TCP,
// has nothing it may send, still gets the whole body, under each runtime's adapter. The idle
// deadline itself, through the real server: test/e2e/body-deadline.test.ts.

const IDLE_MS = 1_000;
const PAUSE_MS = 3_000;
// Far more than the socket buffers hold: the client is still sending when the route stops reading.
const SIZE = 64 << 20;

/** POSTs `size` bytes as fast as the server takes them; resolves with the answer's status and body. */
function upload(url: string, size: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = request(url, { method: "POST", headers: { "content-length": String(size) } }, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (text: string) => (body += text));
      response.once("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    outgoing.once("error", reject);
    const block = Buffer.alloc(1 << 20, 7);
    let sent = 0;
    const pump = () => {
      while (sent < size) {
        sent += block.byteLength;
        if (!outgoing.write(block)) return void outgoing.once("drain", pump);
      }
      outgoing.end();
    };
    pump();
  });
}

describe.each<RuntimeName>(["bun", "node", "deno"])("a route that reads its body slowly, under %s", (runtime) => {
  it("gets the whole body: its own pause is not the client's silence", async () => {
    const server = await startServer({ runtime, entry: "test/runtime/fixtures/slow-reader.ts", env: { IDLE_MS: String(IDLE_MS), PAUSE_MS: String(PAUSE_MS) } });
    try {
      const url = /listening on (\S+)/.exec(server.output())![1]!;
      const { status, body } = await upload(url, SIZE);
      expect([status, JSON.parse(body)]).toEqual([200, { bytes: SIZE }]);
    } finally {
      await server.stop(2_000);
    }
  });
});

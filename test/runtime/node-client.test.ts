import { describe, expect, it } from "vitest";
import { Agent, createServer } from "node:http";
import { gzipSync } from "node:zlib";
import { callFetch, closesConnection, nodeHttpSend, type Call } from "../../src/runtime/node-client.ts";

// Node sends a runner call that closes its connection through node:http's client, the rest through
// undici's dispatch (src/runtime/node.ts): which calls close theirs.

const call = (headers: Record<string, string>): Call => ({ origin: "http://runner", path: "/completion", method: "POST", headers, body: undefined, signal: undefined });

describe("closesConnection", () => {
  it("is true for Connection: close, in any case of name or value", () => {
    expect(closesConnection(call({ "content-type": "application/json", connection: "close" }))).toBe(true);
    expect(closesConnection(call({ Connection: " Close " }))).toBe(true);
  });

  it("is false without the header, or with another value", () => {
    expect(closesConnection(call({ "content-type": "application/json" }))).toBe(false);
    expect(closesConnection(call({ connection: "keep-alive" }))).toBe(false);
    expect(closesConnection(call({ "x-connection": "close" }))).toBe(false);
  });
});

describe("an answer through node:http's client", () => {
  it("has its headers by their names in any case, repeated ones kept, and its encoded body inflated", async () => {
    const server = createServer((_, response) => {
      response.setHeader("Set-Cookie", ["a=1", "b=2"]);
      response.writeHead(200, { "Content-Type": "text/plain", "Content-Encoding": "GZIP", "X-Runner": "llama" }).end(gzipSync("inflated"));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const fetch = callFetch(nodeHttpSend(new Agent()));
      const response = await fetch(`http://127.0.0.1:${(server.address() as { port: number }).port}/`, { headers: { connection: "close" } });
      expect([response.headers.get("content-type"), response.headers.get("x-runner"), response.headers.getSetCookie()]).toEqual(["text/plain", "llama", ["a=1", "b=2"]]);
      expect(await response.text()).toBe("inflated");
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

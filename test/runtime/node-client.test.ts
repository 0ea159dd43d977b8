import { describe, expect, it } from "vitest";
import { closesConnection, type Call } from "../../src/runtime/node-client.ts";

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

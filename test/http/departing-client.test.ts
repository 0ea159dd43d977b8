import { describe, expect, it } from "vitest";
import { startServer, type RuntimeName } from "../support/server-process.ts";

// A client that leaves in the middle of a streamed answer gets its body cancelled, under each
// runtime's adapter, so that whatever produces it stops, even while it has nothing to send.
// Regression: under Node and Deno (served through node:http) the body of a departed client was
// not cancelled after a POST (the adapter heard of a GET's client leaving, not of a POST's whose
// body was read): an Ollama pull whose download was slow went on for nobody.

describe.each<RuntimeName>(["bun", "node", "deno"])("a client that leaves a stream, under %s", (runtime) => {
  it("has the body cancelled", async () => {
    const server = await startServer({ runtime, entry: "test/http/fixtures/departing-client.ts" });
    try {
      const url = /listening on (\S+)/.exec(server.output())![1]!;
      const client = new AbortController();
      const response = await fetch(url, { method: "POST", body: "{}", headers: { "content-type": "application/json" }, signal: client.signal });
      const first = await response.body!.getReader().read();
      expect(new TextDecoder().decode(first.value)).toBe("hello\n");
      expect(server.output()).not.toContain("body cancelled");
      client.abort();
      await server.waitForOutput(/body cancelled/, 10_000);
    } finally {
      await server.stop(2_000);
    }
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type ServerProcess } from "../support/server-process.ts";

// Bun's adapter turns requests away past HTTP_MAX_CONNECTIONS in flight, counting a streamed answer
// until its body ends or its client leaves (slow-clients.test.ts covers buffered answers, per runtime).

describe("the in-flight cap under Bun, for streamed answers", () => {
  let server: ServerProcess;
  let base: string;
  beforeAll(async () => {
    server = await startServer({ runtime: "bun", entry: "test/http/fixtures/capped-stream.ts" });
    base = /listening on (\S+)/.exec(server.output())![1]!;
  });
  afterAll(() => server.stop(2_000));

  const plain = async () => {
    const response = await fetch(`${base}/plain`);
    return { status: response.status, body: await response.text() };
  };
  /** The first answer that is not a 503, asking every 100 ms for up to 5 s (the server frees a place just after the client saw the end). */
  const servedAgain = async () => {
    let answer = await plain();
    for (let tries = 0; tries < 50 && answer.status === 503; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      answer = await plain();
    }
    return answer;
  };

  it("holds a place while the stream runs and gives it back when it ends", async () => {
    const response = await fetch(`${base}/stream?chunks=5`);
    const reader = response.body!.getReader();
    await reader.read();
    const turnedAway = await fetch(`${base}/plain`);
    expect(turnedAway.status).toBe(503);
    expect(turnedAway.headers.get("retry-after")).toBe("1");
    expect(((await turnedAway.json()) as { error: { code: string } }).error.code).toBe("too_many_connections");
    while (!(await reader.read()).done);
    expect(await servedAgain()).toEqual({ status: 200, body: "ok" });
  });

  it("gives the place back when the stream's client leaves", async () => {
    const client = new AbortController();
    const response = await fetch(`${base}/stream?chunks=600`, { signal: client.signal });
    await response.body!.getReader().read();
    expect((await plain()).status).toBe(503);
    client.abort();
    // The stream would run for a minute; its place must come back long before.
    expect(await servedAgain()).toEqual({ status: 200, body: "ok" });
  });
});

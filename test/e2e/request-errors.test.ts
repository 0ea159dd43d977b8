import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";

// An error our code does not expect, in a request's work, costs that request only: it is logged
// with the request (method, path, id), counted in /metrics, answered (500 naming the id) while the
// answer has not begun, and the server keeps serving. The trigger is a model store whose index
// is not JSON: reading it throws a SyntaxError, no error of ours. Regression: the events stream
// read the state in a promise nobody handled, and the rejection ended the process.

/** Reads a streamed answer to its end, or to the connection's cut: what came, and how it ended. */
function readToEnd(url: string, path: string): Promise<{ status: number; text: string; ended: "end" | "cut" }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const outgoing = request({ host: hostname, port, path, agent: false });
    outgoing.once("error", reject);
    outgoing.once("response", (response) => {
      let text = "";
      response.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
      response.once("end", () => resolve({ status: response.statusCode ?? 0, text, ended: "end" }));
      response.once("error", () => resolve({ status: response.statusCode ?? 0, text, ended: "cut" }));
    });
    outgoing.end();
  });
}

describe.each<RuntimeName>(["bun", "node", "deno"])("an unexpected error in a request, under %s", (runtime) => {
  let dir: string;
  let server: ServerProcess;
  let url: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-errors-"));
    await mkdir(join(dir, "models"), { recursive: true });
    await writeFile(join(dir, "models", "models.json"), "{ not json");
    server = await startServer({
      runtime,
      ...(runtime === "deno" ? { runtimeArgs: denoPermissions(["--allow-read", "--allow-write", "--allow-run", "--allow-sys"]) } : {}),
      env: { SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: join(dir, "runner.sock"), MODELS_PATH: join(dir, "models"), INFERENCE_RUNTIME_DIR: join(dir, "run"), INFERENCE_LOG_DIR: join(dir, "logs") },
      ready: [/model runner service listening on http:\/\/[\d.]+:\d+/],
    });
    url = /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
  });
  afterAll(async () => {
    await server?.stop(5_000);
    await rm(dir, { recursive: true, force: true });
  });

  it("is logged with its request, counted, answered if it still can be, and the server keeps serving", async () => {
    const listed = await ask({ url }, "GET", "/models", undefined, { "x-request-id": "list-7" });
    expect([listed.status, listed.headers["x-request-id"], listed.json().error.code]).toEqual([500, "list-7", "internal_error"]);
    expect(listed.json().error.message).toContain("request list-7");
    await server.waitForOutput(/request error \(id list-7\) GET \/models: SyntaxError/);

    // The events stream has begun when the state fails to read: it ends with an error event
    // naming the request, which the log names too.
    const events = await readToEnd(url, "/engines/events");
    expect([events.status, events.ended, events.text.startsWith("retry:")]).toEqual([200, "end", true]);
    const failed = /event: error\ndata: (.*)\n\n$/.exec(events.text);
    expect(JSON.parse(failed![1]!).error.code).toBe("internal_error");
    const id = /request ([\w-]+)/.exec(failed![1]!)![1]!;
    await server.waitForOutput(new RegExp(`request error \\(id ${id}\\) GET /engines/events: SyntaxError`));

    expect(server.child.exitCode).toBe(null);
    expect((await ask({ url }, "GET", "/engines/status")).status).toBe(200);
    const metrics = (await ask({ url }, "GET", "/metrics")).body;
    expect(metrics).toMatch(/^llamadock_request_errors_total 2$/m);
  });
});

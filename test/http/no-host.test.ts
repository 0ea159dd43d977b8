import { mkdtemp, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { denoPermissions, startServer, type ServerProcess } from "../support/server-process.ts";

// An HTTP/1.0 request carries no Host header: load balancers' health checks send such requests
// (HAProxy's `option httpchk GET /readyz`). Each runtime serves it like any other.

/** Sends `request` as raw bytes (not half-closing, as HAProxy does not) and reads until the server closes: status and body. */
function raw(url: string, request: string): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(request));
    let text = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => (text += chunk));
    socket.once("error", reject);
    socket.once("close", () => resolve({ status: Number(/^HTTP\/1\.\d (\d{3})/.exec(text)?.[1]), body: text.split("\r\n\r\n").slice(1).join("\r\n\r\n") }));
  });
}

describe.each(["bun", "node", "deno"] as const)("a request without a Host header, under %s", (runtime) => {
  let dir: string;
  let server: ServerProcess;
  let url: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-nohost-"));
    server = await startServer({
      runtime,
      ...(runtime === "deno" ? { runtimeArgs: denoPermissions(["--allow-read", "--allow-write", "--allow-run", "--allow-sys"]) } : {}),
      env: { SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: "none", API_KEYS: "k", MODELS_PATH: join(dir, "models"), INFERENCE_RUNTIME_DIR: join(dir, "run"), INFERENCE_LOG_DIR: join(dir, "logs"), INFERENCE_SETTINGS_PATH: join(dir, "settings.json") },
    });
    url = /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
  });
  afterAll(async () => {
    await server?.stop(5_000);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("answers an open path, and asks for the key elsewhere", async () => {
    const live = await raw(url, "GET /livez HTTP/1.0\r\n\r\n");
    expect([live.status, JSON.parse(live.body)]).toEqual([200, { status: "alive" }]);
    const models = await raw(url, "GET /models HTTP/1.0\r\n\r\n");
    expect([models.status, JSON.parse(models.body).error.code]).toEqual([401, "invalid_api_key"]);
    const keyed = await raw(url, "GET /models HTTP/1.0\r\nAuthorization: Bearer k\r\n\r\n");
    expect([keyed.status, JSON.parse(keyed.body)]).toEqual([200, []]);
  });
});

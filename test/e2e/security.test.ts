import { spawnSync } from "node:child_process";
import { statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { startServer, type ServerProcess } from "../support/server-process.ts";

// The security layer through real HTTP, the server under Bun with a tiny model loaded: a page on
// another site (forged Host, foreign Origin, "simple" requests that need no preflight) has no
// effect; keys in both headers; a non-loopback bind without a key does not start.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"] });
  // A loaded runner: the foreign requests below try to unload it.
  await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "a", max_tokens: 1 });
});
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
const loaded = async () => (await ask(tcp(), "GET", "/engines/ps")).json().length as number;

describe("a page on another site", () => {
  it("cannot reach the API through DNS rebinding (a forged Host): 403 JSON, no effect", async () => {
    const answer = await ask(tcp(), "POST", "/engines/unload", { all: true }, { host: "evil.example:12434" });
    expect([answer.status, answer.json().error.code]).toEqual([403, "host_not_allowed"]);
    expect(await loaded()).toBe(1);
  });

  it("cannot unload, pull or infer with a text/plain POST from a foreign origin", async () => {
    const foreign = { origin: "http://evil.example", "content-type": "text/plain" };
    for (const [path, body] of [
      ["/engines/unload", { all: true }],
      ["/models/create", { from: "ai/huge" }],
      ["/v1/chat/completions", { model: "ai/tiny", messages: [{ role: "user", content: "burn" }] }],
    ] as const) {
      const answer = await ask(tcp(), "POST", path, JSON.stringify(body), foreign);
      expect([path, answer.status, answer.headers["access-control-allow-origin"]]).toEqual([path, 403, undefined]);
    }
    expect(await loaded()).toBe(1);
    expect((await ask(tcp(), "GET", "/models")).json()).toHaveLength(1);
  });

  it("preflights: an allowed origin gets 204 and the grant, a foreign one none", async () => {
    const preflight = (origin: string) =>
      ask(tcp(), "OPTIONS", "/v1/chat/completions", undefined, { origin, "access-control-request-method": "POST", "access-control-request-headers": "content-type,authorization" });
    const allowed = await preflight("http://localhost:5173");
    expect([allowed.status, allowed.headers["access-control-allow-origin"], allowed.headers["access-control-allow-headers"]]).toEqual([204, "http://localhost:5173", "content-type, authorization"]);
    const foreign = await preflight("https://evil.example");
    expect([foreign.status, foreign.headers["access-control-allow-origin"]]).toEqual([403, undefined]);
  });

  it("an allowed origin's stream carries the grant", async () => {
    const answer = await ask(tcp(), "POST", "/v1/completions", { model: "ai/tiny", prompt: "a", max_tokens: 2, stream: true }, { origin: "http://127.0.0.1:3000" });
    expect(answer.headers["access-control-allow-origin"]).toBe("http://127.0.0.1:3000");
    expect(answer.body.trimEnd().endsWith("data: [DONE]")).toBe(true);
  });
});

describe("what a body may ask", () => {
  it.each([
    [{ n_discard: -8 }, "field_not_allowed"],
    [{ id_slot: 0 }, "field_not_allowed"],
    [{ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "file:///etc/shadow" } }] }] }, "media_not_allowed"],
    [{ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://169.254.169.254/" } }] }] }, "media_not_allowed"],
  ])("%j is refused with 400 before it reaches llama-server", async (extra, code) => {
    const answer = await ask(tcp(), "POST", "/v1/chat/completions", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], ...extra });
    expect([answer.status, answer.json().error.code]).toEqual([400, code]);
  });

  it("the Unix socket is its owner's alone", () => {
    expect(statSync(stack.socket).mode & 0o777).toBe(0o600);
  });
});

describe("API keys and binding", () => {
  let dir: string;
  let server: ServerProcess | undefined;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-keys-"));
  });
  afterAll(async () => {
    await server?.stop();
    await rm(dir, { recursive: true, force: true });
  });
  const env = (extra: Record<string, string>) => ({
    SERVICES: "runner",
    RUNNER_PORT: "0",
    RUNNER_SOCKET: join(dir, "r.sock"),
    MODELS_PATH: join(dir, "models"),
    INFERENCE_RUNTIME_DIR: join(dir, "run"),
    INFERENCE_SETTINGS_PATH: join(dir, "s.json"),
    ...extra,
  });

  it("refuses to start on a non-loopback address without a key, with one clear line", async () => {
    const refused = await startServer({ runtime: "bun", env: env({ RUNNER_HOST: "0.0.0.0" }), ready: [/would listen on 0\.0\.0\.0 with no API key/] });
    expect(await refused.exited).toBe(1);
    expect(refused.output()).not.toMatch(/listening/);
  });

  it("with keys, asks one on TCP (Bearer or x-api-key), keeps OPEN_PATHS open, trusts the socket", async () => {
    server = await startServer({
      runtime: "bun",
      env: env({ RUNNER_HOST: "0.0.0.0", API_KEYS: "s3cret,other", OPEN_PATHS: "/metrics" }),
      ready: [/model runner service listening on http:/],
    });
    const port = /listening on http:\/\/0\.0\.0\.0:(\d+)/.exec(server.output())![1];
    const url = { url: `http://127.0.0.1:${port}` };
    const none = await ask(url, "GET", "/models");
    expect([none.status, none.json().error.code, none.headers["www-authenticate"]]).toEqual([401, "invalid_api_key", "Bearer"]);
    expect((await ask(url, "GET", "/models", undefined, { authorization: "Bearer s3cret" })).status).toBe(200);
    expect((await ask(url, "GET", "/models", undefined, { "x-api-key": "other" })).status).toBe(200);
    expect((await ask(url, "GET", "/models", undefined, { "x-api-key": "s3cre" })).status).toBe(401);
    expect((await ask(url, "GET", "/metrics")).status).toBe(200);
    expect((await ask({ socketPath: join(dir, "r.sock") }, "GET", "/exp/vDD4.40/models")).status).toBe(200);
    // The key never shows in the process list when it comes from a file; here it is in the env only.
    expect(spawnSync("ps", ["-o", "args=", "-p", String(server.pid)]).stdout.toString()).not.toMatch(/s3cret/);
  });
});

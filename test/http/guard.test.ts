import { describe, expect, it } from "vitest";
import { DEFAULT_ORIGINS, guard, isLoopback, originMatcher, type GuardPolicy } from "../../src/http/guard.ts";
import type { ListenTarget } from "../../src/runtime/types.ts";

// The guard in process: each rule with a real Request, and a handler that records whether any
// request got through (a refusal must come before any effect).

const LOOPBACK: ListenTarget = { kind: "tcp", hostname: "127.0.0.1", port: 12434 };
const policy = (extra: Partial<GuardPolicy> = {}): GuardPolicy => ({ allowedHosts: [], allowedOrigins: DEFAULT_ORIGINS, apiKeys: [], openPaths: [], ...extra });

function guarded(target: ListenTarget = LOOPBACK, extra: Partial<GuardPolicy> = {}) {
  const reached: string[] = [];
  const handler = guard(
    async (request) => {
      reached.push(`${request.method} ${new URL(request.url).pathname}`);
      return Response.json({ ok: true });
    },
    target,
    policy(extra),
  );
  return { handler, reached };
}

const req = (path: string, headers: Record<string, string> = {}, init: RequestInit = {}) =>
  new Request(`http://127.0.0.1:12434${path}`, { ...init, headers: { host: "127.0.0.1:12434", ...headers } });

const errorOf = async (response: Response) => ((await response.json()) as { error: { code: string; type: string } }).error;

describe("Host (DNS rebinding)", () => {
  it.each(["127.0.0.1:12434", "localhost:12434", "LOCALHOST", "app.localhost:8080", "[::1]:12434", "127.3.4.5"])("serves Host %s on a loopback listener", async (host) => {
    const { handler, reached } = guarded();
    expect((await handler(req("/models", { host }))).status).toBe(200);
    expect(reached).toHaveLength(1);
  });

  it.each(["evil.example", "evil.example:12434", "127.0.0.1.evil.example", "localhost.evil.example", "192.168.1.5:12434"])(
    "refuses Host %s with 403 JSON before the route",
    async (host) => {
      const { handler, reached } = guarded();
      const response = await handler(req("/models", { host }, { method: "POST" }));
      expect(response.status).toBe(403);
      expect(await errorOf(response)).toMatchObject({ code: "host_not_allowed", type: "permission_error" });
      expect(reached).toEqual([]);
    },
  );

  it("serves a name listed in ALLOWED_HOSTS, and its subdomains with *.", async () => {
    const { handler } = guarded(LOOPBACK, { allowedHosts: ["runner.lan", "*.example.com"] });
    expect((await handler(req("/", { host: "runner.lan:12434" }))).status).toBe(200);
    expect((await handler(req("/", { host: "gpu.example.com" }))).status).toBe(200);
    expect((await handler(req("/", { host: "example.com.evil" }))).status).toBe(403);
  });

  it("a listener bound elsewhere checks only when names are configured; the Unix socket never", async () => {
    const lan: ListenTarget = { kind: "tcp", hostname: "0.0.0.0", port: 12434 };
    expect((await guarded(lan).handler(req("/", { host: "10.1.2.3:12434" }))).status).toBe(200);
    expect((await guarded(lan, { allowedHosts: ["gpu.lan"] }).handler(req("/", { host: "10.1.2.3" }))).status).toBe(403);
    expect((await guarded({ kind: "unix", path: "/run/x.sock" }).handler(req("/", { host: "anything" }))).status).toBe(200);
  });
});

describe("Origin (CORS)", () => {
  it("refuses a cross-site simple request (text/plain POST, no preflight) before any effect", async () => {
    const { handler, reached } = guarded();
    const response = await handler(req("/engines/unload", { origin: "https://evil.example", "content-type": "text/plain" }, { method: "POST", body: '{"all":true}' }));
    expect(response.status).toBe(403);
    expect(response.headers.get("access-control-allow-origin")).toBeNull();
    expect(await errorOf(response)).toMatchObject({ code: "origin_not_allowed" });
    expect(reached).toEqual([]);
  });

  it("grants an allowed origin on the answer", async () => {
    const { handler } = guarded();
    const response = await handler(req("/models", { origin: "http://localhost:3000" }));
    expect(response.status).toBe(200);
    expect(response.headers.get("access-control-allow-origin")).toBe("http://localhost:3000");
    expect(response.headers.get("vary")).toMatch(/Origin/);
  });

  it("answers a preflight from an allowed origin with 204 and the grant, the SDKs' headers included", async () => {
    const { handler, reached } = guarded();
    const response = await handler(
      req("/v1/messages", {
        origin: "vscode-webview://abc",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type, x-api-key, anthropic-version, x-stainless-os, x-evil",
      }, { method: "OPTIONS" }),
    );
    expect(response.status).toBe(204);
    expect(response.headers.get("access-control-allow-origin")).toBe("vscode-webview://abc");
    expect(response.headers.get("access-control-allow-methods")).toMatch(/POST/);
    expect(response.headers.get("access-control-allow-headers")).toBe("content-type, x-api-key, anthropic-version, x-stainless-os");
    expect(Number(response.headers.get("access-control-max-age"))).toBeGreaterThan(0);
    expect(reached).toEqual([]);
  });

  it("gives a preflight from another origin no grant", async () => {
    const response = await guarded().handler(req("/v1/chat/completions", { origin: "https://evil.example", "access-control-request-method": "POST" }, { method: "OPTIONS" }));
    expect(response.status).toBe(403);
    expect(response.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("keeps a streamed answer a stream, with the grant", async () => {
    const handler = guard(async () => new Response(new ReadableStream({ start: (c) => (c.enqueue(new TextEncoder().encode("data: 1\n\n")), c.close()) }), { headers: { "content-type": "text/event-stream" } }), LOOPBACK, policy());
    const response = await handler(req("/v1/chat/completions", { origin: "http://127.0.0.1:5173" }, { method: "POST" }));
    expect(response.headers.get("access-control-allow-origin")).toBe("http://127.0.0.1:5173");
    expect(response.headers.get("content-type")).toBe("text/event-stream");
    expect(await response.text()).toBe("data: 1\n\n");
  });

  it.each<[string, string[], boolean]>([
    ["http://localhost", DEFAULT_ORIGINS, true],
    ["https://127.0.0.1:8443", DEFAULT_ORIGINS, true],
    ["http://[::1]:80", DEFAULT_ORIGINS, true],
    ["tauri://localhost", DEFAULT_ORIGINS, true],
    ["http://localhost.evil.example", DEFAULT_ORIGINS, false],
    ["http://127.0.0.2", DEFAULT_ORIGINS, false],
    ["null", DEFAULT_ORIGINS, false],
    ["https://app.example.com", [...DEFAULT_ORIGINS, "https://*.example.com"], true],
    ["https://example.com.evil", [...DEFAULT_ORIGINS, "https://*.example.com"], false],
    ["https://anything", ["*"], true],
  ])("origin %s with %j: %s", (origin, patterns, allowed) => {
    expect(originMatcher(patterns)(origin)).toBe(allowed);
  });
});

describe("API keys", () => {
  const keyed = () => guarded(LOOPBACK, { apiKeys: ["k-one", "k-two"], openPaths: ["/metrics"] });

  it.each([
    ["Bearer", { authorization: "Bearer k-two" }],
    ["x-api-key", { "x-api-key": "k-one" }],
  ])("accepts a key as %s", async (_, headers) => {
    const { handler, reached } = keyed();
    expect((await handler(req("/models", headers))).status).toBe(200);
    expect(reached).toHaveLength(1);
  });

  it.each([
    ["no key", {}],
    ["a wrong key", { authorization: "Bearer k-three" }],
    ["a prefix of a key", { "x-api-key": "k-on" }],
    ["a key as Basic", { authorization: "Basic k-one" }],
  ])("refuses %s with 401 JSON and WWW-Authenticate", async (_, headers) => {
    const { handler, reached } = keyed();
    const response = await handler(req("/models/create", headers, { method: "POST" }));
    expect(response.status).toBe(401);
    expect(response.headers.get("www-authenticate")).toBe("Bearer");
    expect(await errorOf(response)).toMatchObject({ type: "authentication_error", code: "invalid_api_key" });
    expect(reached).toEqual([]);
  });

  it("leaves open paths open, and trusts the Unix socket's peer", async () => {
    expect((await keyed().handler(req("/metrics"))).status).toBe(200);
    const socket = guarded({ kind: "unix", path: "/run/x.sock" }, { apiKeys: ["k-one"] });
    expect((await socket.handler(req("/models"))).status).toBe(200);
  });

  it("a preflight needs no key (browsers send none), and a 401 still carries the grant", async () => {
    const { handler } = keyed();
    expect((await handler(req("/models", { origin: "http://localhost:3000", "access-control-request-method": "GET" }, { method: "OPTIONS" }))).status).toBe(204);
    const refused = await handler(req("/models", { origin: "http://localhost:3000" }));
    expect([refused.status, refused.headers.get("access-control-allow-origin")]).toEqual([401, "http://localhost:3000"]);
  });
});

it.each([
  ["127.0.0.1", true],
  ["localhost", true],
  ["::1", true],
  ["[::1]", true],
  ["0.0.0.0", false],
  ["192.168.1.2", false],
  ["::", false],
])("isLoopback(%s) = %s", (name, loopback) => {
  expect(isLoopback(name)).toBe(loopback);
});

import { createHash, timingSafeEqual } from "node:crypto";
import type { FetchHandler, ListenTarget } from "../runtime/types.ts";
import { errorResponse } from "./errors.ts";

// The one door every request passes before any route: who may call. In this order, each refusal
// before any effect:
// 1. Host (DNS rebinding): on a loopback listener only loopback names and ALLOWED_HOSTS; a page on
//    another site whose name was made to resolve to 127.0.0.1 still sends its own name.
// 2. Origin (CORS): a browser request from an origin not allowed is refused whatever its method and
//    content type (a "simple" text/plain POST needs no preflight); an allowed one gets its grant,
//    preflights included.
// 3. API keys, when configured: `Authorization: Bearer` or `x-api-key`, compared in constant time.
// The Unix socket is owner-only and trusts its peer: no Host or key check there. Which routes a
// key may call, once it is let in (an admin's or any key's): src/keys/access.ts.

export type GuardPolicy = {
  /** Host names allowed besides loopback ones (`*.example.com` matches subdomains). */
  allowedHosts: string[];
  /** Origins allowed (exact, or with `*` for any run of characters); `*` alone allows all. */
  allowedOrigins: string[];
  /** Accepted API keys; empty: none asked. */
  apiKeys: string[];
  /** Paths that need no key (e.g. `/metrics` for Prometheus). */
  openPaths: string[];
};

/** What browsers may send and read: the headers the OpenAI and Anthropic SDKs add. */
const ALLOWED_HEADERS = [
  "authorization",
  "content-type",
  "x-api-key",
  "anthropic-version",
  "anthropic-beta",
  "anthropic-dangerous-direct-browser-access",
  "openai-organization",
  "openai-project",
  "openai-beta",
  "x-request-id",
];
const ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS";
const EXPOSED_HEADERS =
  "retry-after, x-should-retry, x-request-id, content-type, x-llamadock-overhead-ms, x-ratelimit-limit-requests, x-ratelimit-remaining-requests, x-ratelimit-reset-requests, x-ratelimit-limit-tokens, x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens";
const PREFLIGHT_MAX_AGE = "600";

export const DEFAULT_ORIGINS = [
  "http://localhost",
  "https://localhost",
  "http://localhost:*",
  "https://localhost:*",
  "http://127.0.0.1",
  "https://127.0.0.1",
  "http://127.0.0.1:*",
  "https://127.0.0.1:*",
  "http://[::1]",
  "https://[::1]",
  "http://[::1]:*",
  "https://[::1]:*",
  "app://*",
  "file://*",
  "tauri://*",
  "vscode-webview://*",
];

const forbidden = (code: string, message: string) => errorResponse(403, "permission_error", code, message);

/** Requests that came on a trusted listener (the Unix socket): their peer may do anything. */
const trustedRequests = new WeakSet<Request>();
export const cameTrusted = (request: Request) => trustedRequests.has(request);

/** A request the process makes of its own routes (a pinned model's pull), trusted as the socket's peer is. */
export const ownRequest = (request: Request): Request => (trustedRequests.add(request), request);

/** Wraps `handler` with the checks its listener needs. */
export function guard(handler: FetchHandler, target: ListenTarget, policy: GuardPolicy): FetchHandler {
  const refusal = refuser(target, policy);
  const trusted = target.kind === "unix";
  return (request) => {
    if (trusted) trustedRequests.add(request);
    const origin = request.headers.get("origin");
    const refused = refusal(request, origin);
    if (refused) return refused;
    // Without an Origin the handler's answer is passed on as it is: a wrapping async frame costs
    // promise hand-offs on every request (measurable under load).
    return origin === null ? handler(request) : Promise.resolve(handler(request)).then((response) => granted(response, origin));
  };
}

/** The refusal a request earns on this listener before any route, if any; `origin` is its Origin header. */
function refuser(target: ListenTarget, policy: GuardPolicy): (request: Request, origin: string | null) => Response | undefined {
  const trustedPeer = target.kind === "unix";
  const checkHost = target.kind === "tcp" && (isLoopback(target.hostname) || policy.allowedHosts.length > 0);
  const originAllowed = originMatcher(policy.allowedOrigins);
  const keys = policy.apiKeys.map(digest);
  const hostJudged = judgedOnce((host: string) => hostAllowed(host, policy.allowedHosts));
  return (request, origin) => {
    if (checkHost && !hostJudged(hostOf(request))) {
      return forbidden("host_not_allowed", `requests for host "${hostOf(request)}" are not served here (see ALLOWED_HOSTS)`);
    }
    if (origin !== null && !originAllowed(origin)) {
      return forbidden("origin_not_allowed", `requests from origin "${origin}" are not allowed (see ALLOWED_ORIGINS)`);
    }
    if (origin !== null && isPreflight(request)) return preflight(request, origin);
    if (!trustedPeer && keys.length > 0 && !policy.openPaths.includes(new URL(request.url).pathname) && !keyAccepted(request, keys)) {
      const response = errorResponse(401, "authentication_error", "invalid_api_key", "a valid API key is required (Authorization: Bearer <key> or x-api-key)", {
        "www-authenticate": "Bearer",
      });
      return origin === null ? response : granted(response, origin);
    }
    return undefined;
  };
}

/**
 * `judge`, remembering its verdicts: a listener sees the same few Host values on every request,
 * and judging one takes several regular expressions. Bounded: random names are judged each time.
 */
function judgedOnce(judge: (value: string) => boolean): (value: string) => boolean {
  const verdicts = new Map<string, boolean>();
  return (value) => {
    let verdict = verdicts.get(value);
    if (verdict === undefined) {
      verdict = judge(value);
      if (verdicts.size < JUDGED_MAX) verdicts.set(value, verdict);
    }
    return verdict;
  };
}

const JUDGED_MAX = 256;

const isPreflight = (request: Request) => request.method === "OPTIONS" && request.headers.has("access-control-request-method");

function preflight(request: Request, origin: string): Response {
  const asked = (request.headers.get("access-control-request-headers") ?? "")
    .split(",")
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
  const headers = asked.filter((h) => ALLOWED_HEADERS.includes(h) || h.startsWith("x-stainless-"));
  return new Response(null, {
    status: 204,
    headers: {
      "access-control-allow-origin": origin,
      "access-control-allow-methods": ALLOWED_METHODS,
      "access-control-allow-headers": headers.join(", "),
      "access-control-max-age": PREFLIGHT_MAX_AGE,
      vary: "Origin",
    },
  });
}

/** The response with the CORS grant for `origin`; a stream passes through as it is. */
function granted(response: Response, origin: string): Response {
  const headers = new Headers(response.headers);
  headers.set("access-control-allow-origin", origin);
  headers.set("access-control-expose-headers", EXPOSED_HEADERS);
  headers.append("vary", "Origin");
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

function hostOf(request: Request): string {
  return request.headers.get("host") ?? new URL(request.url).host;
}

/** The name without its port: `[::1]:80` -> `::1`, `Example.com.:80` -> `example.com`. */
export function hostName(host: string): string {
  const name = host.startsWith("[") ? host.slice(1, host.indexOf("]")) : host.replace(/:\d*$/, "");
  return name.toLowerCase().replace(/\.$/, "");
}

/** A bare name (no port) that only this machine answers: `localhost`, `*.localhost`, 127.0.0.0/8, `::1`. */
export function isLoopback(name: string): boolean {
  const bare = name.toLowerCase().replace(/^\[(.*)\]$/, "$1").replace(/\.$/, "");
  return bare === "localhost" || bare.endsWith(".localhost") || bare === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare);
}

function hostAllowed(host: string, allowed: string[]): boolean {
  const name = hostName(host);
  if (isLoopback(name)) return true;
  return allowed.some((entry) => (entry.startsWith("*.") ? name.endsWith(entry.slice(1)) : name === hostName(entry)));
}

/** Origins match exactly (case-insensitively), or as patterns where `*` stands for any characters. */
export function originMatcher(patterns: string[]): (origin: string) => boolean {
  if (patterns.includes("*")) return () => true;
  const regexes = patterns.map((p) => new RegExp(`^${p.toLowerCase().split("*").map(escapeRegExp).join(".*")}$`));
  return (origin) => {
    const o = origin.toLowerCase();
    return regexes.some((r) => r.test(o));
  };
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Keys are compared as sha256 digests: equal lengths, and the comparison takes the same time. */
const digest = (key: string) => createHash("sha256").update(key).digest();

/** The API key a request carries: `Authorization: Bearer <key>`, else `x-api-key`. */
function givenKey(request: Request): string | undefined {
  const bearer = /^Bearer\s+(.+)$/i.exec(request.headers.get("authorization") ?? "")?.[1]?.trim();
  return bearer ?? request.headers.get("x-api-key") ?? undefined;
}

function keyAccepted(request: Request, keys: Buffer[]): boolean {
  const given = givenKey(request);
  if (!given) return false;
  const candidate = digest(given);
  let accepted = false;
  for (const key of keys) accepted = timingSafeEqual(candidate, key) || accepted; // no early exit
  return accepted;
}

/**
 * Whom a request speaks for, where data is kept per caller (stored responses): with API keys
 * configured, a digest of the key it carries (the guard has checked it; never the key itself);
 * without, everyone is one caller whatever key a client sends. A request on the Unix socket
 * without a key (its peer is trusted) is the empty scope.
 */
export function callerScope(apiKeys: string[]): (request: Request) => string {
  if (apiKeys.length === 0) return () => "";
  return (request) => {
    const given = givenKey(request);
    return given ? digest(given).toString("base64url") : "";
  };
}

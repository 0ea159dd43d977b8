import { unauthorized, upstreamFailure } from "../errors.ts";
import { DEFAULT_STALL_MS, DOCUMENT_LIMIT, DOCUMENT_LIMIT_TEXT, fetchWithin, readBounded, upstream, type Transfer } from "../upstream.ts";

// Registry authentication (the OCI distribution token flow): a registry that wants a token answers
// 401 with `WWW-Authenticate: Bearer realm="…",service="…",scope="…"`; the client asks the realm
// for a token (with credentials when it has some) and repeats the request with it. `Basic`
// challenges get the credentials directly.

export type Credentials = { username: string; password: string };

export type Challenge = { scheme: string; params: Record<string, string> };

export function parseChallenge(header: string): Challenge | undefined {
  const match = /^\s*(\w+)\s*(.*)$/s.exec(header);
  if (!match) return undefined;
  const params: Record<string, string> = {};
  for (const [, key, quoted, bare] of match[2]!.matchAll(/(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g)) {
    params[key!.toLowerCase()] = quoted !== undefined ? quoted.replace(/\\(.)/g, "$1") : bare!;
  }
  return { scheme: match[1]!.toLowerCase(), params };
}

export const basic = ({ username, password }: Credentials) =>
  `Basic ${btoa(String.fromCharCode(...new TextEncoder().encode(`${username}:${password}`)))}`;

export type TokenRequest = {
  challenge: Challenge;
  scope: string;
  credentials?: Credentials;
  /** A token given with the pull: sent to the realm when there are no credentials. */
  bearerToken?: string;
  fetch: typeof fetch;
  signal: AbortSignal;
  /** How long the token service may send nothing before the request fails. */
  stallTimeoutMs?: number;
};

/** Answers a 401's challenge with the `Authorization` value to retry with. */
export async function authorize(request: TokenRequest): Promise<string> {
  const { challenge, credentials } = request;
  if (challenge.scheme === "basic") {
    if (!credentials) throw unauthorized("the registry requires credentials");
    return basic(credentials);
  }
  if (challenge.scheme !== "bearer" || !challenge.params.realm) throw unauthorized(`unsupported registry authentication "${challenge.scheme}"`);
  const realm = URL.parse(challenge.params.realm);
  if (!realm) throw upstreamFailure(`the registry's token realm is not a URL: ${challenge.params.realm}`);
  if (challenge.params.service) realm.searchParams.set("service", challenge.params.service);
  realm.searchParams.set("scope", challenge.params.scope ?? request.scope);
  const headers: Record<string, string> = {};
  if (credentials) headers.authorization = basic(credentials);
  else if (request.bearerToken) headers.authorization = `Bearer ${request.bearerToken}`;
  const t: Transfer = { who: `the token service ${realm.host}`, what: "a token", stallMs: request.stallTimeoutMs ?? DEFAULT_STALL_MS, signal: request.signal };
  const bytes = await upstream(request.signal, `cannot get a token from ${realm.host}`, async () => {
    const response = await fetchWithin(request.fetch, realm, { headers }, t);
    if (!response.ok) {
      await response.body?.cancel();
      throw unauthorized(`the registry's token service refused (${response.status})`);
    }
    return readBounded(response, DOCUMENT_LIMIT, t, DOCUMENT_LIMIT_TEXT);
  });
  const token = tokenIn(new TextDecoder().decode(bytes));
  if (!token) throw unauthorized("the registry's token service gave no token");
  return `Bearer ${token}`;
}

function tokenIn(text: string): string | undefined {
  let body: { token?: unknown; access_token?: unknown } | null;
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    return undefined;
  }
  const token = typeof body?.token === "string" ? body.token : body?.access_token;
  return typeof token === "string" && token ? token : undefined;
}

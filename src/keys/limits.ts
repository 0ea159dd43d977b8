import { HttpError } from "../http/errors.ts";
import type { Caller, KeyLimits } from "./keyring.ts";

// Each key's limits: requests at once, requests and tokens in any 60 s (a sliding window: what
// was counted more than a minute ago no longer counts). A request past one is refused at once with
// 429, `Retry-After` (whole seconds) and OpenAI's `x-ratelimit-*` headers. Tokens are counted when
// an answer ends (its size is not known before): a key is refused once its last minute holds its
// tokens, so one long answer may take it past the limit, and its next request then waits.

const WINDOW_MS = 60_000;

export type LimitName = "in_flight" | "requests_per_minute" | "tokens_per_minute";

/** One admitted request's hold on its key's limits. */
export type Admitted = {
  /** OpenAI's x-ratelimit-* headers for the key's limits (none when it has none). */
  headers: Record<string, string>;
  /** The request ended with these tokens (once; later calls do nothing). */
  done(tokens: number): void;
};

export interface Limiter {
  /** Admits a request of `caller`, or throws the 429 of the first limit it is past. */
  admit(caller: Caller): Admitted;
  /** Requests refused, by key name and limit. */
  refusals(): Map<string, Map<LimitName, number>>;
}

type KeyState = { inFlight: number; requests: number[]; tokens: { at: number; n: number }[] };

export function createLimiter(now: () => number = Date.now): Limiter {
  const keys = new Map<string, KeyState>();
  const refused = new Map<string, Map<LimitName, number>>();
  const refuse = (caller: Caller, limit: LimitName, retryMs: number, message: string, headers: Record<string, string>): never => {
    const counts = refused.get(caller.name) ?? new Map<LimitName, number>();
    counts.set(limit, (counts.get(limit) ?? 0) + 1);
    refused.set(caller.name, counts);
    const retryAfter = String(Math.max(1, Math.ceil(retryMs / 1000)));
    throw new HttpError(429, "rate_limit_error", "rate_limit_exceeded", message, { ...headers, "retry-after": retryAfter });
  };
  return {
    refusals: () => refused,
    admit(caller) {
      const { limits, name } = caller;
      if (!limits.inFlight && !limits.requestsPerMinute && !limits.tokensPerMinute) return FREE;
      const at = now();
      const state = keys.get(name) ?? { inFlight: 0, requests: [], tokens: [] };
      keys.set(name, state);
      while (state.requests.length && state.requests[0]! <= at - WINDOW_MS) state.requests.shift();
      while (state.tokens.length && state.tokens[0]!.at <= at - WINDOW_MS) state.tokens.shift();
      const headers = rateHeaders(limits, state, at);
      if (limits.inFlight && state.inFlight >= limits.inFlight) {
        refuse(caller, "in_flight", 1000, `key ${name} has ${state.inFlight} requests in flight, its limit: try again once one has ended`, headers);
      }
      if (limits.requestsPerMinute && state.requests.length >= limits.requestsPerMinute) {
        const wait = state.requests[state.requests.length - limits.requestsPerMinute]! + WINDOW_MS - at;
        refuse(caller, "requests_per_minute", wait, `rate limit reached for key ${name} on requests per min (RPM): limit ${limits.requestsPerMinute}, used ${state.requests.length}; try again in ${duration(wait)}`, headers);
      }
      const used = tokensIn(state);
      if (limits.tokensPerMinute && used >= limits.tokensPerMinute) {
        const wait = tokensFreeAt(state, limits.tokensPerMinute) + WINDOW_MS - at;
        refuse(caller, "tokens_per_minute", wait, `rate limit reached for key ${name} on tokens per min (TPM): limit ${limits.tokensPerMinute}, used ${used}; try again in ${duration(wait)}`, headers);
      }
      state.inFlight++;
      if (limits.requestsPerMinute) state.requests.push(at);
      let ended = false;
      return {
        headers: rateHeaders(limits, state, at),
        done(tokens) {
          if (ended) return;
          ended = true;
          state.inFlight--;
          if (limits.tokensPerMinute && tokens > 0) state.tokens.push({ at: now(), n: tokens });
        },
      };
    },
  };
}

const FREE: Admitted = { headers: {}, done: () => {} };

const tokensIn = (state: KeyState) => state.tokens.reduce((sum, t) => sum + t.n, 0);

/** When the oldest tokens that must age out for the key to be under its limit were counted. */
function tokensFreeAt(state: KeyState, limit: number): number {
  let over = tokensIn(state) - limit;
  for (const t of state.tokens) {
    over -= t.n;
    if (over < 0) return t.at;
  }
  return state.tokens.at(-1)?.at ?? 0;
}

/** OpenAI's headers: limit, remaining and time to reset (to the full limit), per kind that is limited. */
function rateHeaders(limits: KeyLimits, state: KeyState, at: number): Record<string, string> {
  const headers: Record<string, string> = {};
  if (limits.requestsPerMinute) {
    headers["x-ratelimit-limit-requests"] = String(limits.requestsPerMinute);
    headers["x-ratelimit-remaining-requests"] = String(Math.max(0, limits.requestsPerMinute - state.requests.length));
    headers["x-ratelimit-reset-requests"] = duration(state.requests.length ? state.requests.at(-1)! + WINDOW_MS - at : 0);
  }
  if (limits.tokensPerMinute) {
    headers["x-ratelimit-limit-tokens"] = String(limits.tokensPerMinute);
    headers["x-ratelimit-remaining-tokens"] = String(Math.max(0, limits.tokensPerMinute - tokensIn(state)));
    headers["x-ratelimit-reset-tokens"] = duration(state.tokens.length ? state.tokens.at(-1)!.at + WINDOW_MS - at : 0);
  }
  return headers;
}

/** A time as OpenAI's headers write it (Go's durations): `120ms`, `12s`, `1m0s`. */
export function duration(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  if (whole < 1000) return `${whole}ms`;
  const seconds = Math.ceil(whole / 1000);
  return seconds < 60 ? `${seconds}s` : `${Math.floor(seconds / 60)}m${seconds % 60}s`;
}

import type { RequestTimer } from "../latency.ts";
import type { Caller } from "../../keys/keyring.ts";
import type { Limiter } from "../../keys/limits.ts";
import type { Ledger } from "./ledger.ts";
import { tokenCounts } from "./tokens.ts";

// Each inference request, counted for its key and model: admitted (or refused at a limit), then
// ended by its answer (tokens from llama-server's counts, an error status as an error) or by a
// failure. Every request is counted once, however it ends.

/** One admitted request: its answer's end closes it through `timer`, a failure through `fail`. */
export type Ticket = {
  /** The key's x-ratelimit-* headers, for the answer. */
  headers: Record<string, string>;
  timer: RequestTimer;
  fail(): void;
};

export interface Meter {
  /** Admits a request of `caller` for `model`, or throws the 429 of a limit (the caller counts it as `refused`). */
  admit(caller: Caller, model: string): Ticket;
  /**
   * A request refused before admission (a bad body, an unknown model): an error, under the model
   * it named once that was found, else under UNKNOWN_MODEL.
   */
  refused(caller: Caller, model?: string): void;
}

/**
 * Where a request refused before its model was found is counted: one row per key and day, never
 * the name it sent (a client naming a new model each time would grow the ledger without end).
 */
export const UNKNOWN_MODEL = "(unknown)";

export function createMeter(ledger: Ledger, limiter: Limiter): Meter {
  const refused = (caller: Caller, model?: string) => ledger.add(caller.name, model || UNKNOWN_MODEL, { requests: 1, errors: 1 });
  return {
    refused,
    admit(caller, model) {
      const admitted = limiter.admit(caller);
      let closed = false;
      const close = (ok: boolean, text: string) => {
        if (closed) return;
        closed = true;
        const tokens = ok ? tokenCounts(text) : { prompt: 0, cached: 0, completion: 0 };
        ledger.add(caller.name, model, { requests: 1, prompt_tokens: tokens.prompt, cached_tokens: tokens.cached, completion_tokens: tokens.completion, errors: ok ? 0 : 1 });
        admitted.done(tokens.prompt + tokens.completion);
      };
      return {
        headers: admitted.headers,
        timer: { firstByte: () => {}, end: close },
        fail: () => close(false, ""),
      };
    },
  };
}

/** Both timers told of the same answer. */
export function bothTimers(a: RequestTimer | undefined, b: RequestTimer): RequestTimer {
  if (!a) return b;
  return {
    firstByte: () => (a.firstByte(), b.firstByte()),
    end: (ok, text) => (a.end(ok, text), b.end(ok, text)),
  };
}

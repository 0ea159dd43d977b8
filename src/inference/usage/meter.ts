import type { RequestTimer } from "../latency.ts";
import type { Caller } from "../../keys/keyring.ts";
import type { Admitted, Limiter } from "../../keys/limits.ts";
import type { Ledger } from "./ledger.ts";
import { tokenCounts, type TokenCounts } from "./tokens.ts";

// Each inference request, counted for its key and model: admitted (or refused at a limit), then
// ended by its answer (tokens from llama-server's counts, an error status as an error) or by a
// failure. Every request is counted once, however it ends.

/** One admitted request: its answer's end closes it (it is the answer's timer), a failure through `fail`. */
export interface Ticket extends RequestTimer {
  /** The key's x-ratelimit-* headers, for the answer. */
  readonly headers: Record<string, string>;
  fail(): void;
}

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
  return {
    refused: (caller, model) => ledger.add(caller.name, model || UNKNOWN_MODEL, { requests: 1, errors: 1 }),
    admit: (caller, model) => new Admission(ledger, caller.name, model, limiter.admit(caller)),
  };
}

/**
 * A ticket: one object with its methods on the class, not closures made per request (they lived
 * until the answer's end, and each collection meanwhile copied them).
 */
class Admission implements Ticket {
  #closed = false;
  readonly #ledger: Ledger;
  readonly #key: string;
  readonly #model: string;
  readonly #admitted: Admitted;

  constructor(ledger: Ledger, key: string, model: string, admitted: Admitted) {
    this.#ledger = ledger;
    this.#key = key;
    this.#model = model;
    this.#admitted = admitted;
  }

  get headers(): Record<string, string> {
    return this.#admitted.headers;
  }

  firstByte(): void {}

  end(ok: boolean, text: string): void {
    if (this.#closed) return;
    this.#closed = true;
    const tokens = ok ? tokenCounts(text) : NO_TOKENS;
    this.#ledger.add(this.#key, this.#model, { requests: 1, prompt_tokens: tokens.prompt, cached_tokens: tokens.cached, completion_tokens: tokens.completion, errors: ok ? 0 : 1 });
    this.#admitted.done(tokens.prompt + tokens.completion);
  }

  fail(): void {
    this.end(false, "");
  }
}

const NO_TOKENS: TokenCounts = Object.freeze({ prompt: 0, cached: 0, completion: 0 });

/** Both timers told of the same answer. */
export function bothTimers(a: RequestTimer | undefined, b: RequestTimer): RequestTimer {
  return a ? new BothTimers(a, b) : b;
}

class BothTimers implements RequestTimer {
  readonly #a: RequestTimer;
  readonly #b: RequestTimer;

  constructor(a: RequestTimer, b: RequestTimer) {
    this.#a = a;
    this.#b = b;
  }

  firstByte(): void {
    this.#a.firstByte();
    this.#b.firstByte();
  }

  end(ok: boolean, text: string): void {
    this.#a.end(ok, text);
    this.#b.end(ok, text);
  }
}

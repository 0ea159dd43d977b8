import { formatLabels, type ExtraFamily, type ShowsKey } from "../metrics.ts";
import type { Limiter } from "../../keys/limits.ts";
import { totals, type Ledger } from "./ledger.ts";

// /metrics' counters per key name and model, from the usage ledger (so they go on across restarts,
// as the ledger does), and the requests each key's limits refused: of the keys `shows` lets the
// scrape see (an admin's sees every key's, a key its own, as GET /engines/usage answers them).

export function usageFamilies(ledger: Ledger, limiter: Limiter, shows: ShowsKey): ExtraFamily[] {
  const rows = totals(ledger.rows(), ["key", "model"]).filter((r) => shows(r.key));
  const line = (name: string, labels: Record<string, string>, value: number) => `${name}${formatLabels(labels)} ${value}`;
  const refused = [...limiter.refusals()].filter(([key]) => shows(key)).flatMap(([key, limits]) =>
    [...limits].map(([limit, n]) => line("llamadock_key_rate_limited_total", { key, limit }, n)),
  );
  return [
    {
      name: "llamadock_key_requests_total",
      type: "counter",
      help: "Inference requests by API key name and model.",
      lines: rows.map((r) => line("llamadock_key_requests_total", { key: r.key, model: r.model }, r.requests)),
    },
    {
      name: "llamadock_key_tokens_total",
      type: "counter",
      help: "Tokens by API key name, model and kind (prompt, completion), as llama-server counted them.",
      lines: rows.flatMap((r) => [
        line("llamadock_key_tokens_total", { key: r.key, model: r.model, kind: "prompt" }, r.prompt_tokens),
        line("llamadock_key_tokens_total", { key: r.key, model: r.model, kind: "completion" }, r.completion_tokens),
      ]),
    },
    {
      // Apart from llamadock_key_tokens_total's kinds, which add up to the tokens: these are part of its prompt ones.
      name: "llamadock_key_prompt_tokens_cached_total",
      type: "counter",
      help: "Prompt tokens read from llama-server's cache rather than processed (part of llamadock_key_tokens_total's prompt), by API key name and model.",
      lines: rows.map((r) => line("llamadock_key_prompt_tokens_cached_total", { key: r.key, model: r.model }, r.cached_tokens)),
    },
    {
      name: "llamadock_key_errors_total",
      type: "counter",
      help: "Inference requests answered with an error, by API key name and model.",
      lines: rows.map((r) => line("llamadock_key_errors_total", { key: r.key, model: r.model }, r.errors)),
    },
    { name: "llamadock_key_rate_limited_total", type: "counter", help: "Requests refused by a key's limit (in_flight, requests_per_minute, tokens_per_minute).", lines: refused },
    {
      name: "llamadock_usage_rows_dropped_total",
      type: "counter",
      help: "Usage rows dropped since start by the ledger's bounds: older than USAGE_KEEP_DAYS (age), past USAGE_MAX_ROWS (rows).",
      lines: Object.entries(ledger.dropped()).map(([reason, n]) => line("llamadock_usage_rows_dropped_total", { reason }, n)),
    },
  ];
}

import type { Route } from "../../http/router.ts";
import { badRequest, HttpError } from "../../http/errors.ts";
import type { Caller } from "../../keys/keyring.ts";
import { totals, type Ledger, type UsageFilter, type UsageRow } from "./ledger.ts";

// GET /engines/usage: requests, tokens and errors per key, model and day. A key sees its own rows
// only; an admin key (and the Unix socket, and everyone where no keys are asked) sees every key's.
// Query: `key`, `model`, `day` or `since`/`until` (YYYY-MM-DD, UTC), `by` (fields to group by,
// comma-separated among day, key, model; default all three).

const DAY = /^\d{4}-\d{2}-\d{2}$/;
const FIELDS = ["day", "key", "model"] as const;

export function usageRoutes(ledger: Ledger, identify: (request: Request) => Caller): Route[] {
  const usage = (request: Request) => {
    const caller = identify(request);
    const query = new URL(request.url).searchParams;
    const filter: UsageFilter = {};
    for (const field of ["model", "key"] as const) {
      const value = query.get(field);
      if (value) filter[field] = value;
    }
    for (const field of ["day", "since", "until"] as const) {
      const value = query.get(field);
      if (value === null) continue;
      if (!DAY.test(value)) throw badRequest("invalid_day", `${field} must be a day as YYYY-MM-DD`);
      filter[field] = value;
    }
    if (!caller.admin) {
      if (filter.key !== undefined && filter.key !== caller.name) {
        throw new HttpError(403, "permission_error", "usage_not_yours", "a key sees its own usage only (an admin key sees all)");
      }
      filter.key = caller.name;
    }
    const by = (query.get("by") ?? FIELDS.join(",")).split(",").filter(Boolean);
    const unknown = by.filter((f) => !(FIELDS as readonly string[]).includes(f));
    if (unknown.length) throw badRequest("invalid_group", `by may name day, key and model, not ${unknown.join(", ")}`);
    const rows = totals(ledger.rows(filter), by as (keyof UsageRow & (typeof FIELDS)[number])[]);
    return Response.json({ object: "list", caller: caller.name, data: rows, total: totals(rows as UsageRow[], [])[0] ?? empty() });
  };
  return [{ method: "GET", path: "/engines/usage", handle: usage }];
}

const empty = () => ({ requests: 0, prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, errors: 0 });

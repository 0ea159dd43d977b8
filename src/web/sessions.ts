import type { UsageRow } from "../inference/usage/ledger.ts";
import type { Caller } from "../keys/keyring.ts";
import type { RunnerSlots, SlotHolder } from "../scheduler/api.ts";

// The status page's sessions view, in the live state: each chat runner's slots and whose
// conversation each holds (an agent session by its key's name and a short id, an anonymous
// conversation), the sessions it parked, and per key and model the prompt tokens of the day
// processed against those read from a slot's cache (what keeping sessions on their slots saves).
// An admin (and everyone where no keys are asked) sees every key's; any other key its own: other
// keys' slots show as held, their parked sessions as a count, their tokens not at all.

/** A session shown by the first characters of its name (an anonymous conversation: of its opening's digest). */
const SHORT_ID = 8;

/** What a slot holds, as a caller may see it. `other key`: another key's conversation, told no more. */
export type ShownSlot = { slot: number; busy: boolean; holds: "nothing" | "session" | "anonymous" | "start" | "other key"; key?: string; id?: string };

export type SessionsState = {
  runners: { model: string; state: string; slots: ShownSlot[]; parked: { key: string; id: string }[]; parked_by_other_keys: number }[];
  /** The day's (UTC) prompt tokens per key and model: `cached` read from a slot's cache, `processed` the rest. */
  tokens: { day: string; rows: { key: string; model: string; requests: number; prompt_tokens: number; processed_tokens: number; cached_tokens: number }[] };
};

const shortId = (name: string) => name.slice(0, SHORT_ID);

function shownSlot(slot: number, busy: boolean, holder: SlotHolder | undefined, sees: (key: string) => boolean): ShownSlot {
  if (holder === undefined) return { slot, busy, holds: "nothing" };
  if ("start" in holder) return { slot, busy, holds: "start" };
  if (!sees(holder.key)) return { slot, busy, holds: "other key" };
  return "session" in holder ? { slot, busy, holds: "session", key: holder.key, id: shortId(holder.session) } : { slot, busy, holds: "anonymous", key: holder.key, id: shortId(holder.opening) };
}

/**
 * The sessions view for `caller`: `tables`, the runners' slot tables (only chat runners place
 * sessions: embedding and reranking ones are left out); `rows`, the usage ledger's rows of `day`.
 */
export function sessionsState(tables: RunnerSlots[], rows: UsageRow[], day: string, caller: Caller): SessionsState {
  const sees = (key: string) => caller.admin || key === caller.name;
  const runners = tables
    .filter((t) => t.mode === "completion")
    .map((t) => {
      const parked = t.parked.filter((p) => sees(p.key));
      return {
        model: t.model,
        state: t.state,
        slots: t.slots.map((s, i) => shownSlot(i, s.busy, s.holder, sees)),
        parked: parked.map((p) => ({ key: p.key, id: shortId(p.session) })),
        parked_by_other_keys: t.parked.length - parked.length,
      };
    });
  const tokens = rows
    .filter((r) => r.day === day && sees(r.key) && r.prompt_tokens > 0)
    .map((r) => ({ key: r.key, model: r.model, requests: r.requests, prompt_tokens: r.prompt_tokens, processed_tokens: r.prompt_tokens - r.cached_tokens, cached_tokens: r.cached_tokens }));
  return { runners, tokens: { day, rows: tokens } };
}

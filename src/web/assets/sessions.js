// The status page's Sessions view: each chat runner's slots and whose conversation each holds (an
// agent session by its key and a short id, an anonymous conversation, another key's as held), the
// sessions it parked, and the day's prompt tokens per key: processed, and read from a slot's cache
// (the saving), from the state /engines/events sends.

import { $, el } from "./common.js";

const HOLDS = { nothing: "empty", session: "session", anonymous: "anonymous", start: "a start only", "other key": "held (another key)" };

const percent = (part, whole) => (whole > 0 ? `${Math.round((100 * part) / whole)}%` : "");

function slotRow(s) {
  const row = el(
    "tr",
    {},
    el("td", { textContent: String(s.slot) }),
    el("td", { className: `holds-${s.holds.replace(" ", "-")}`, textContent: HOLDS[s.holds] ?? s.holds }),
    el("td", { textContent: s.key ?? "" }),
    el("td", { className: "name", textContent: s.id ?? "" }),
    el("td", { textContent: s.busy ? "working" : "idle" }),
  );
  row.dataset.slot = String(s.slot);
  return row;
}

function runnerSlots(r) {
  const parked = r.parked.map((p) => `${p.key} ${p.id}`);
  if (r.parked_by_other_keys > 0) parked.push(`${r.parked_by_other_keys} of other keys`);
  const table = el("table", { className: "slots" }, el("thead", {}, el("tr", {}, ...["Slot", "Holds", "Key", "Session", "Now"].map((h) => el("th", { textContent: h })))), el("tbody", {}, ...r.slots.map(slotRow)));
  const box = el("div", { className: "runner-slots" }, el("h3", { textContent: `${r.model} (${r.state})` }), table, el("p", { className: "parked", textContent: `Parked: ${parked.length > 0 ? parked.join(", ") : "none"}` }));
  box.dataset.model = r.model;
  return box;
}

function tokenRow(t) {
  return el(
    "tr",
    {},
    el("td", { textContent: t.key }),
    el("td", { className: "name", textContent: t.model }),
    el("td", { textContent: String(t.requests) }),
    el("td", { textContent: String(t.prompt_tokens) }),
    el("td", { textContent: String(t.processed_tokens) }),
    el("td", { className: "cached", textContent: String(t.cached_tokens) }),
    el("td", { className: "saved", textContent: percent(t.cached_tokens, t.prompt_tokens) }),
  );
}

/** Fills the Sessions view from `state.sessions`. */
export function renderSessions(state) {
  const sessions = state.sessions ?? { runners: [], tokens: { day: "", rows: [] } };
  $("#tokens-day").textContent = sessions.tokens.day;
  $("#tokens tbody").replaceChildren(...sessions.tokens.rows.map(tokenRow));
  $("#no-tokens").hidden = sessions.tokens.rows.length > 0;
  $("#slot-tables").replaceChildren(...sessions.runners.map(runnerSlots));
  $("#no-slot-tables").hidden = sessions.runners.length > 0;
}

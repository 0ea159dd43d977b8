// The status page's Loads table: each model's load in progress (queued, starting, restoring a
// cache) and its last load times, from the state /engines/events sends.

import { $, el } from "./common.js";

/** Fills the Loads table from `state` (its `loads` and `runners`). */
export function renderLoads(state) {
  const loads = state.loads ?? { in_progress: [], last: {} };
  const models = new Set([...loads.in_progress.map((l) => l.model), ...Object.keys(loads.last)]);
  const ready = (model) => state.runners.some((r) => r.model === model && r.state === "ready");
  $("#loads tbody").replaceChildren(
    ...[...models].map((model) => {
      const now = loads.in_progress.filter((l) => l.model === model).map((l) => `${l.phase} (${l.mode})`).join(", ");
      const last = (loads.last[model] ?? []).map((l) => `${l.seconds.toFixed(2)} s${l.cache_restored ? " (cache restored)" : ""}`).join(", ");
      return el("tr", {}, el("td", { className: "name", textContent: model }), el("td", { textContent: now || (ready(model) ? "ready" : "") }), el("td", { textContent: last }));
    }),
  );
  $("#no-loads").hidden = models.size > 0;
}

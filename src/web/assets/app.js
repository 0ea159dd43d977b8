// The status page: plain DOM, no framework, same-origin calls to the model runner's own API.
// Live state comes from GET /engines/events (server-sent events, read with fetch so that an API
// key can be sent with it). Text from the server is only ever set as textContent.

import { $, api, bytes, duration, el, keyStore, lines, shortId } from "./common.js";
import { renderLoads } from "./loads.js";
import { renderSessions } from "./sessions.js";

// ---- views ------------------------------------------------------------------------------------

function showView() {
  const name = (location.hash || "#overview").slice(1);
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== name;
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.view === name);
  if (name === "models") void loadSettings();
}
addEventListener("hashchange", showView);

let state = { runners: [], models: [], pulls: [] };

function keepAliveLeft(runner) {
  if (runner.unloads_at == null) return runner.state === "ready" && runner.in_use === 0 ? "never" : "";
  return duration(runner.unloads_at - Date.now());
}

/** Loads in progress (queued, starting, restoring a cache) and how long each model's last loads took. */
function renderOverview() {
  $("#runners tbody").replaceChildren(
    ...state.runners.map((r) =>
      el(
        "tr",
        {},
        el("td", { className: "name", textContent: r.model }),
        el("td", { textContent: r.mode }),
        el("td", { className: `state-${r.state}`, textContent: r.state }),
        el("td", { textContent: String(r.in_use) }),
        el("td", { textContent: String(r.waiting) }),
        el("td", { textContent: bytes(r.memory_bytes) }),
        el("td", { className: "keep-alive", textContent: keepAliveLeft(r) }),
      ),
    ),
  );
  $("#no-runners").hidden = state.runners.length > 0;
  renderLoads(state);
  $("#models-overview tbody").replaceChildren(
    ...state.models.map((m) =>
      el("tr", {}, el("td", { className: "name", textContent: m.name }), el("td", { textContent: shortId(m.id) }), el("td", { textContent: m.parameters ?? "" }), el("td", { textContent: m.quantization ?? "" }), el("td", { textContent: m.size ?? "" })),
    ),
  );
  $("#no-models").hidden = state.models.length > 0;
  $("#pulls").replaceChildren(...state.pulls.map((p) => el("div", { className: "pull" }, el("h3", { textContent: p.model }), ...p.layers.map(layerBar))));
  $("#no-pulls").hidden = state.pulls.length > 0;
}

function layerBar(layer) {
  return el(
    "div",
    { className: "layer" },
    el("span", { textContent: shortId(layer.id) }),
    el("progress", { max: layer.size, value: layer.current }),
    el("span", { textContent: `${bytes(layer.current)} / ${bytes(layer.size)}` }),
  );
}

function fillSelect(select, names) {
  const current = select.value;
  if ([...select.options].map((o) => o.value).join() === names.join()) return;
  select.replaceChildren(...names.map((name) => el("option", { value: name, textContent: name })));
  if (names.includes(current)) select.value = current;
}

let listedModels = "";
function renderModels() {
  const names = state.models.map((m) => m.name);
  fillSelect($("#chat-model"), names);
  fillSelect($("#logs-model"), names);
  // Rebuilt only when the models change, so that a setting being typed is not wiped.
  const key = state.models.map((m) => m.id + m.tags.join()).join();
  if (key === listedModels) return;
  listedModels = key;
  $("#models-list tbody").replaceChildren(...state.models.map(modelRow));
  void loadSettings();
}

function modelRow(model) {
  const context = el("input", { type: "number", min: -1, placeholder: "model's", name: "context" });
  const keepAlive = el("input", { placeholder: "5m", name: "keep-alive" });
  const save = el("button", { type: "button", textContent: "Save" });
  const remove = el("button", { type: "button", textContent: "Delete" });
  save.onclick = () => configure(model.name, context.value, keepAlive.value);
  remove.onclick = () => deleteModel(model.name);
  const row = el("tr", {}, el("td", { className: "name", textContent: model.name }), el("td", { textContent: model.size ?? "" }), el("td", {}, context), el("td", {}, keepAlive), el("td", {}, save, " ", remove));
  row.dataset.model = model.name;
  return row;
}

async function loadSettings() {
  const entries = await (await api("/engines/_configure")).json().catch(() => []);
  for (const entry of entries) {
    const row = document.querySelector(`#models-list tr[data-model="${CSS.escape(entry.Model)}"]`);
    if (!row) continue;
    row.querySelector("[name=context]").value = entry.Config["context-size"] ?? "";
    row.querySelector("[name=keep-alive]").value = entry.Config.keep_alive ?? "";
  }
}

const modelsMessage = (text, error = false) => Object.assign($("#models-message"), { textContent: text, className: error ? "error" : "" });

async function configure(model, context, keepAlive) {
  const body = { model };
  if (context !== "") body["context-size"] = Number(context);
  if (keepAlive !== "") body.keep_alive = keepAlive;
  try {
    await api("/engines/_configure", { method: "POST", body });
    modelsMessage(`Saved the settings of ${model}; its runner reloads with them.`);
  } catch (error) {
    modelsMessage(error.message, true);
  }
}

async function deleteModel(model) {
  if (!confirm(`Delete ${model}?`)) return;
  try {
    await api(`/models/${model.split("/").map(encodeURIComponent).join("/")}`, { method: "DELETE" });
    modelsMessage(`Deleted ${model}.`);
  } catch (error) {
    modelsMessage(error.message, true);
  }
}

// ---- pulls ------------------------------------------------------------------------------------

$("#pull-form").onsubmit = async (event) => {
  event.preventDefault();
  const name = $("#pull-name").value.trim();
  const result = $("#pull-result");
  const layers = new Map();
  const button = $("#pull-form button");
  button.disabled = true;
  result.className = "";
  result.textContent = `Pulling ${name}…`;
  $("#pull-progress").replaceChildren();
  try {
    const response = await api("/models/create", { method: "POST", body: { from: name } });
    let last;
    for await (const line of lines(response)) {
      if (!line.trim()) continue;
      const event = JSON.parse(line);
      if (event.layer) {
        layers.set(event.layer.id, event.layer);
        $("#pull-progress").replaceChildren(...[...layers.values()].map(layerBar));
      }
      if (event.type === "success" || event.type === "error") last = event;
    }
    if (last?.type !== "success") throw new Error(last?.message ?? "the pull ended early");
    result.textContent = `${name}: ${last.message}`;
  } catch (error) {
    result.className = "error";
    result.textContent = error.message;
  } finally {
    button.disabled = false;
  }
};

// ---- playground -------------------------------------------------------------------------------

let history = [];
let generation;

function addMessage(role, text) {
  const node = el("div", { className: `msg ${role}`, textContent: text });
  $("#chat-log").append(node);
  return node;
}

$("#chat-form").onsubmit = async (event) => {
  event.preventDefault();
  const model = $("#chat-model").value;
  const prompt = $("#chat-input").value.trim();
  if (!model || !prompt) return;
  $("#chat-input").value = "";
  history.push({ role: "user", content: prompt });
  addMessage("user", prompt);
  const answer = addMessage("assistant", "");
  generation = new AbortController();
  $("#chat-send").disabled = true;
  $("#chat-stop").disabled = false;
  $("#chat-speed").textContent = "";
  try {
    const response = await api("/engines/v1/chat/completions", { method: "POST", body: { model, messages: history, stream: true }, signal: generation.signal });
    for await (const line of lines(response)) {
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const chunk = JSON.parse(line.slice(6));
      if (chunk.error) throw new Error(chunk.error.message);
      answer.textContent += chunk.choices?.[0]?.delta?.content ?? "";
      $("#chat-log").scrollTop = $("#chat-log").scrollHeight;
      // llama-server's own timings, on its last chunk.
      if (chunk.timings?.predicted_per_second) $("#chat-speed").textContent = `${chunk.timings.predicted_n} tokens, ${chunk.timings.predicted_per_second.toFixed(1)} tokens/s`;
    }
    history.push({ role: "assistant", content: answer.textContent });
  } catch (error) {
    if (generation.signal.aborted) {
      history.push({ role: "assistant", content: answer.textContent });
      answer.append(el("em", { textContent: " [stopped]" }));
    } else {
      history.pop();
      answer.className = "msg error";
      answer.textContent = error.message;
    }
  } finally {
    $("#chat-send").disabled = false;
    $("#chat-stop").disabled = true;
  }
};
$("#chat-stop").onclick = () => generation?.abort();
$("#chat-clear").onclick = () => {
  generation?.abort();
  history = [];
  $("#chat-log").replaceChildren();
  $("#chat-speed").textContent = "";
};

// ---- logs -------------------------------------------------------------------------------------

let following;
$("#logs-form").onsubmit = async (event) => {
  event.preventDefault();
  following?.abort();
  following = new AbortController();
  const pre = $("#logs-text");
  pre.textContent = "";
  try {
    const query = new URLSearchParams({ model: $("#logs-model").value, follow: "true" });
    const response = await api(`/engines/logs?${query}`, { signal: following.signal });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent += value;
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
  } catch (error) {
    if (!following.signal.aborted) pre.textContent += `\n${error.message}\n`;
  }
};

// ---- live state -------------------------------------------------------------------------------

async function live() {
  const badge = $("#live");
  for (;;) {
    try {
      const response = await api("/engines/events");
      badge.textContent = "live";
      badge.classList.add("on");
      let data = "";
      for await (const line of lines(response)) {
        if (line.startsWith("data: ")) data += line.slice(6);
        else if (line === "" && data) {
          state = JSON.parse(data);
          data = "";
          renderOverview();
          renderSessions(state);
          renderModels();
        }
      }
    } catch (error) {
      badge.textContent = `disconnected: ${error.message}`;
    }
    badge.classList.remove("on");
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

// The keep-alive countdown moves every second without a new event.
setInterval(() => {
  document.querySelectorAll("#runners td.keep-alive").forEach((cell, i) => {
    if (state.runners[i]) cell.textContent = keepAliveLeft(state.runners[i]);
  });
}, 1000);

$("#key-form").onsubmit = (event) => {
  event.preventDefault();
  localStorage.setItem(keyStore, $("#key").value);
  location.reload();
};

showView();
void live();

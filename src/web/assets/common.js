// What every view of the status page uses: DOM helpers, calls to the model runner's API (with the
// API key, if one was given), and formatting. Loaded by app.js as a module.

export const $ = (selector) => document.querySelector(selector);
export const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
};

// ---- the API ----------------------------------------------------------------------------------

export const keyStore = "llamadock.apiKey";
const headers = (extra = {}) => {
  const key = localStorage.getItem(keyStore);
  return key ? { ...extra, authorization: `Bearer ${key}` } : extra;
};

export async function api(path, { method = "GET", body, signal } = {}) {
  const init = { method, signal, headers: headers(body === undefined ? {} : { "content-type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (response.status === 401) $("#key-form").hidden = false;
  if (!response.ok) {
    const text = await response.text();
    let message = `${response.status} ${text}`;
    try {
      message = JSON.parse(text).error.message;
    } catch {}
    throw new Error(message);
  }
  return response;
}

export async function* lines(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += value;
    let end;
    while ((end = pending.indexOf("\n")) >= 0) {
      yield pending.slice(0, end);
      pending = pending.slice(end + 1);
    }
  }
  if (pending) yield pending;
}

// ---- formatting -------------------------------------------------------------------------------

const units = ["B", "kB", "MB", "GB", "TB"];
export function bytes(n) {
  if (n == null) return "";
  let unit = 0;
  while (n >= 1000 && unit < units.length - 1) {
    n /= 1000;
    unit += 1;
  }
  return unit ? `${n.toFixed(2)} ${units[unit]}` : `${n} B`;
}
export function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  const m = Math.floor(s / 60);
  return m ? `${m}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}
export const shortId = (id) => id.replace(/^sha256:/, "").slice(0, 12);

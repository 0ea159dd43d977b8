import type { SchedulerObserver, RunnerInfo } from "../scheduler/scheduler.ts";
import { modelGauges, type ModelGauges, type Scraped } from "./gauges.ts";
import { createLatency, histogramLines, LATENCY_FAMILIES, TOKEN_FAMILIES, type Latency, type RequestTimer } from "./latency.ts";

// GET /metrics: Prometheus text of our own counters, then each runner's llama-server metrics with
// labels naming the runner (backend, model, mode), each family's samples grouped under one HELP/TYPE.
// Per model (label model_name), the gauges and latencies of the inference model-server protocol,
// under our prefix and again under vLLM's (`vllm:`), so that endpoint pickers, KEDA scalers and
// dashboards written for vLLM read them unchanged.

type Labels = Record<string, string>;

const FAMILIES = {
  llamadock_requests_total: ["counter", "Inference requests by route and status."],
  llamadock_request_errors_total: ["counter", "Requests whose work failed with an error of ours (a bug), each logged with its request."],
  llamadock_runner_loads_total: ["counter", "Runner loads by model, mode and result."],
  llamadock_runner_load_seconds: ["summary", "Time from spawning a runner to its first healthy answer."],
  llamadock_runner_crashes_total: ["counter", "Runners that exited on their own while loaded."],
  llamadock_runners: ["gauge", "Loaded runners by state."],
  llamadock_queue_depth: ["gauge", "Requests waiting for a runner slot."],
  llamadock_requests_in_flight: ["gauge", "Requests holding a runner slot."],
} as const;

type Family = keyof typeof FAMILIES;
type Sample = { family: Family; suffix: string; labels: Labels; value: number };

export interface InferenceMetrics {
  observer: SchedulerObserver;
  countRequest(route: string, status: number): void;
  /** One request's work failed with an error of ours (see http/request-errors.ts). */
  countRequestError(): void;
  /** Times one request for `model`, which arrived at `arrivedMs` (performance.now()). */
  timer(model: string, arrivedMs: number): RequestTimer;
  /** `scraped`: each runner's /metrics; `slots`: each runner's /slots; `shows`: whose per-key series (all by default). */
  render(runners: RunnerInfo[], scraped: Scraped[], slots?: Scraped[], shows?: ShowsKey): string;
}

/** Whether a scrape shows a key's own series (usage per key): an admin's shows every key's, a key's its own. */
export type ShowsKey = (key: string) => boolean;

const EVERY_KEY: ShowsKey = () => true;

/** The model-server protocol's prefixes: ours, and vLLM's. */
const PREFIXES = ["llamadock:", "vllm:"];

const GAUGES: Record<string, [string, keyof ModelGauges]> = {
  num_requests_waiting: ["Requests waiting: for a runner slot here, or deferred by llama-server.", "waiting"],
  num_requests_running: ["Requests holding a runner slot.", "running"],
  kv_cache_usage_perc: ["KV-cache use, 0 to 1: tokens held by the slots at work over the context of all slots.", "kvUsage"],
};

/** A family of samples rendered as it is (`lines` are whole sample lines). */
export type ExtraFamily = { name: string; type: string; help: string; lines: string[] };

/** `extra`: further families read on each render (usage per key, of the keys the scrape shows). */
export function createMetrics(extra: (shows: ShowsKey) => ExtraFamily[] = () => []): InferenceMetrics {
  const counters = new Map<string, Sample>();
  const latency = createLatency();
  const add = (family: Family, labels: Labels, by = 1, suffix = "") => {
    const key = `${family}${suffix}${formatLabels(labels)}`;
    const entry = counters.get(key) ?? { family, suffix, labels, value: 0 };
    entry.value += by;
    counters.set(key, entry);
    return entry;
  };
  // Counted on every request: each (route, status) sample is found without formatting its labels.
  const requests = new Map<string, Sample>();
  // Shown from the start, at 0: an alert on its rate needs the series before the first error.
  const requestErrors = add("llamadock_request_errors_total", {}, 0);
  return {
    observer: {
      loaded(model, mode, ms) {
        add("llamadock_runner_loads_total", { model, mode, result: "ok" });
        add("llamadock_runner_load_seconds", { model, mode }, ms / 1000, "_sum");
        add("llamadock_runner_load_seconds", { model, mode }, 1, "_count");
      },
      loadFailed: (model, mode) => add("llamadock_runner_loads_total", { model, mode, result: "error" }),
      crashed: (model, mode) => add("llamadock_runner_crashes_total", { model, mode }),
    },
    countRequest(route, status) {
      const key = `${route} ${status}`;
      const entry = requests.get(key);
      if (entry) entry.value++;
      else requests.set(key, add("llamadock_requests_total", { route, status: String(status) }));
    },
    countRequestError: () => void requestErrors.value++,
    timer: (model, arrivedMs) => latency.timer(model, arrivedMs),
    render(runners, scraped, slots = [], shows = EVERY_KEY) {
      const samples: Sample[] = [...counters.values()];
      const states = new Map<string, number>();
      for (const r of runners) {
        states.set(r.state, (states.get(r.state) ?? 0) + 1);
        samples.push({ family: "llamadock_queue_depth", suffix: "", labels: { model: r.model, mode: r.mode }, value: r.waiting });
        samples.push({ family: "llamadock_requests_in_flight", suffix: "", labels: { model: r.model, mode: r.mode }, value: r.inUse });
      }
      for (const [state, value] of states) samples.push({ family: "llamadock_runners", suffix: "", labels: { state }, value });
      const families = new Map<string, { help?: string; type?: string; lines: string[] }>();
      for (const [name, [type, help]] of Object.entries(FAMILIES)) families.set(name, { help, type, lines: [] });
      for (const s of samples) families.get(s.family)!.lines.push(`${s.family}${s.suffix}${formatLabels(s.labels)} ${s.value}`);
      addModelFamilies(families, modelGauges(runners, scraped, slots), latency);
      for (const { name, type, help, lines } of extra(shows)) families.set(name, { help, type, lines });
      for (const { model, mode, text } of scraped) mergeRunnerMetrics(families, text, { backend: "llama.cpp", model, mode });
      return renderFamilies(families);
    },
  };
}

type Families = Map<string, { help?: string; type?: string; lines: string[] }>;

function addModelFamilies(families: Families, gauges: Map<string, ModelGauges>, latency: Latency): void {
  const timed = latency.models();
  for (const prefix of PREFIXES) {
    for (const [name, [help, field]] of Object.entries(GAUGES)) {
      const lines = [...gauges].map(([model, g]) => `${prefix}${name}${formatLabels({ model_name: model })} ${g[field]}`);
      families.set(prefix + name, { help, type: "gauge", lines });
    }
    for (const [name, [help, field]] of Object.entries(TOKEN_FAMILIES)) {
      const lines = [...timed].map(([model, t]) => `${prefix}${name}${formatLabels({ model_name: model })} ${t[field]}`);
      families.set(prefix + name, { help, type: "counter", lines });
    }
    for (const [name, [help, kind]] of Object.entries(LATENCY_FAMILIES)) {
      const lines = [...timed].flatMap(([model, t]) => histogramLines(prefix + name, formatLabels({ model_name: model }).slice(1, -1), t.histograms[kind]));
      families.set(prefix + name, { help, type: "histogram", lines });
    }
  }
}

/** Adds a runner's exposition to `families`, with `labels` put first on each of its samples. */
export function mergeRunnerMetrics(families: Families, text: string, labels: Labels): void {
  const extra = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",");
  for (const line of text.split("\n")) {
    const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
    if (meta) {
      const family = familyOf(families, meta[2]!);
      if (meta[1] === "HELP") family.help ??= meta[3];
      else family.type ??= meta[3];
      continue;
    }
    const sample = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(.*)$/.exec(line.trim());
    if (!sample) continue;
    const [, name, own, value] = sample;
    const inner = own ? own.slice(1, -1).trim() : "";
    familyOf(families, name!).lines.push(`${name}{${inner ? `${extra},${inner}` : extra}} ${value}`);
  }
}

function familyOf(families: Families, name: string) {
  let family = families.get(name);
  if (!family) families.set(name, (family = { lines: [] }));
  return family;
}

function renderFamilies(families: Families): string {
  const out: string[] = [];
  for (const [name, { help, type, lines }] of families) {
    if (help !== undefined) out.push(`# HELP ${name} ${help}`);
    if (type !== undefined) out.push(`# TYPE ${name} ${type}`);
    out.push(...lines);
  }
  return out.join("\n") + "\n";
}

export function formatLabels(labels: Labels): string {
  const pairs = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
  return pairs.length ? `{${pairs.join(",")}}` : "";
}

const escapeLabel = (value: string) => value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");

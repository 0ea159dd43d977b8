import { readdir } from "node:fs/promises";
import { request, type ClientRequest } from "node:http";
import { join } from "node:path";
import { isAlive, startStack, type Stack } from "../inference/harness.ts";
import type { RuntimeName } from "./server-process.ts";

// A bounded load-and-fault run against the model runner as it ships (a child process, real
// runners, two tiny models): concurrent chat and completion requests, half streamed, over TCP and
// the Unix socket; a quarter of the streams abandoned by their client; a few bad inputs; runners
// killed with SIGKILL; then SIGTERM. Every request is classified, and anything a client should
// never see is a problem: a hang, an error that is not JSON, a stream cut without an error event,
// a failure with no runner killed during it, a process or socket left behind.

export type LoadOptions = {
  runtime: RuntimeName;
  seconds: number;
  concurrency: number;
  /** Runners killed with SIGKILL, spread over the run. */
  kills: number;
  /** How long one request may take before it counts as hung. */
  hangMs?: number;
  env?: Record<string, string>;
};

export type LoadReport = {
  requests: number;
  counts: Record<string, number>;
  kills: number;
  latencyMs: { p50: number; p99: number; max: number };
  problems: string[];
};

type Outcome = { kind: string; problem?: string };
type Target = { url: string } | { socketPath: string };

const MODELS = ["ai/alpha", "ai/beta"];
/** A failure within this long after a kill may be that kill's doing (the request met the dying runner). */
const KILL_MARGIN_MS = 2_000;

export async function runLoad(options: LoadOptions): Promise<LoadReport> {
  const stack = await startStack({
    runtime: options.runtime,
    models: MODELS,
    env: { INFERENCE_QUEUE_DEPTH: "16", INFERENCE_MAX_RUNNERS: "2", INFERENCE_SLOTS: "4", ...options.env },
  });
  const problems: string[] = [];
  const counts: Record<string, number> = {};
  const latencies: number[] = [];
  const kills: number[] = [];
  const pidsSeen = new Set<number>();
  const hangMs = options.hangMs ?? 30_000;
  const until = Date.now() + options.seconds * 1000;
  let serial = 0;

  const killedDuring = (began: number, ended: number) => kills.some((t) => t >= began - KILL_MARGIN_MS && t <= ended);

  async function worker(): Promise<void> {
    while (Date.now() < until) {
      const i = serial++;
      const began = Date.now();
      const outcome = await withDeadline(oneRequest(stack, i), hangMs, () => {
        if (!problems.some((p) => p.startsWith("runners when"))) void snapshot(stack).then((text) => problems.push(`runners when request ${i} hung: ${text}`));
        return { kind: "hung", problem: `request ${i} hung (${describeRequest(i)})` };
      });
      const ended = Date.now();
      latencies.push(ended - began);
      let { kind, problem } = outcome;
      if (kind === "failed" && killedDuring(began, ended)) kind = "failed (runner killed)";
      else if (kind === "failed") problem ??= `request ${i} failed with no runner killed: ${outcome.problem ?? ""}`;
      counts[kind] = (counts[kind] ?? 0) + 1;
      if (problem && kind !== "failed (runner killed)") problems.push(problem);
    }
  }

  async function killer(): Promise<void> {
    for (let k = 1; k <= options.kills; k++) {
      const at = (options.seconds * 1000 * k) / (options.kills + 1);
      while (Date.now() < until - options.seconds * 1000 + at) await sleep(50);
      const pids = await stack.runnerPids();
      pids.forEach((pid) => pidsSeen.add(pid));
      const victim = pids[k % Math.max(1, pids.length)];
      if (victim === undefined) continue;
      kills.push(Date.now());
      process.kill(victim, "SIGKILL");
    }
  }

  async function watchPids(): Promise<void> {
    while (Date.now() < until) {
      for (const pid of await stack.runnerPids()) pidsSeen.add(pid);
      await sleep(200);
    }
  }

  try {
    await Promise.all([...Array.from({ length: options.concurrency }, worker), killer(), watchPids()]);
    for (const pid of await stack.runnerPids()) pidsSeen.add(pid);
    // SIGTERM: the server stops its runners and removes their files before it exits.
    const exit = await stack.server.stop(15_000);
    if (exit !== 0) problems.push(`the server exited with ${exit} on SIGTERM`);
    const left = (await readdir(join(stack.dir, "run")).catch(() => [])).filter((f) => f.endsWith(".sock") || f.endsWith(".pid"));
    if (left.length) problems.push(`left behind after SIGTERM: ${left.join(", ")}`);
    for (let i = 0; i < 40 && [...pidsSeen].some(isAlive); i++) await sleep(50);
    for (const pid of pidsSeen) if (isAlive(pid)) problems.push(`runner ${pid} outlived the server`);
  } finally {
    await stack.stop();
  }
  const sorted = [...latencies].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? 0;
  return { requests: serial, counts, kills: kills.length, latencyMs: { p50: at(0.5), p99: at(0.99), max: sorted.at(-1) ?? 0 }, problems };
}

/** One request of the mix, chosen by a hash of its number (so no choice follows another). */
function oneRequest(stack: Stack, i: number): Promise<Outcome> {
  const h = mix(i);
  const target: Target = h & 1 ? { url: stack.url } : { socketPath: stack.socket };
  const prefix = "socketPath" in target ? "/exp/vDD4.40" : "";
  const model = MODELS[(h >> 1) & 1]!;
  if ((h >>> 8) % 29 === 0) return bad(target, prefix, h >>> 16);
  const stream = ((h >> 2) & 1) === 0;
  const chat = ((h >> 3) & 1) === 0;
  const body = {
    model,
    max_tokens: 8 + ((h >> 4) & 7),
    ignore_eos: true,
    stream,
    ...(chat ? { messages: [{ role: "user", content: `hello ${i}` }] } : { prompt: `once ${i}` }),
  };
  const path = `${prefix}/v1/${chat ? "chat/completions" : "completions"}`;
  const abandon = stream && ((h >>> 20) & 3) === 0;
  return send(target, path, JSON.stringify(body), abandon).then((answer) => classify(answer, stream, abandon));
}

/** The runners as the server sees them, for the message of a hang. */
async function snapshot(stack: Stack): Promise<string> {
  const ps = await fetch(`${stack.url}/engines/ps`).then((r) => r.text(), (e: Error) => e.message);
  return `${ps} pids ${JSON.stringify(await stack.runnerPids())}`;
}

/** What request `i` is, for a problem's message. */
function describeRequest(i: number): string {
  const h = mix(i);
  if ((h >>> 8) % 29 === 0) return "bad input";
  const stream = ((h >> 2) & 1) === 0;
  return [h & 1 ? "tcp" : "socket", MODELS[(h >> 1) & 1], stream ? "stream" : "plain", ((h >> 3) & 1) === 0 ? "chat" : "completion", stream && ((h >>> 20) & 3) === 0 ? "abandoned" : ""].join(" ").trim();
}

/** A 32-bit integer hash (lowbias32): every bit depends on every bit of `i`. */
function mix(i: number): number {
  let x = i + 1;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

/** Inputs a client gets wrong: each must come back as a JSON error with a 4xx status. */
function bad(target: Target, prefix: string, i: number): Promise<Outcome> {
  const cases = [
    [`${prefix}/v1/chat/completions`, "{not json"],
    [`${prefix}/v1/chat/completions`, JSON.stringify({ messages: [] })],
    [`${prefix}/v1/completions`, JSON.stringify({ model: "ai/absent", prompt: "x" })],
    [`${prefix}/v1/chat/completions`, JSON.stringify({ model: "ai/alpha", messages: "not a list" })],
  ] as const;
  const [path, body] = cases[i % cases.length]!;
  return send(target, path, body, false).then((answer) => {
    const envelope = jsonError(answer.body);
    if (answer.status >= 400 && answer.status < 500 && envelope) return { kind: "bad input refused" };
    return { kind: "bad input mishandled", problem: `bad input ${path} got ${answer.status} ${answer.body.slice(0, 200)}` };
  });
}

type Answer = { status: number; contentType: string; body: string; error?: Error };

function classify(answer: Answer, stream: boolean, abandoned: boolean): Outcome {
  if (abandoned) return answer.error && !answer.body ? { kind: "failed", problem: `abandoned stream got no first chunk: ${answer.error.message}` } : { kind: "abandoned by client" };
  if (answer.error) return { kind: "failed", problem: `connection error: ${answer.error.message}` };
  // Load shedding, as documented: a full queue, or a request whose runner went away twice.
  const shed = answer.status === 503 ? jsonError(answer.body)?.code : undefined;
  if (shed === "queue_full" || shed === "runner_gone") return { kind: `503 ${shed}` };
  if (answer.status !== 200) {
    const envelope = jsonError(answer.body);
    if (!envelope) return { kind: "non-JSON error", problem: `${answer.status} ${answer.contentType}: ${answer.body.slice(0, 200)}` };
    return { kind: "failed", problem: `${answer.status} ${envelope.code}: ${envelope.message}` };
  }
  if (!stream) return JSON.parse(answer.body).choices ? { kind: "ok" } : { kind: "failed", problem: `200 without choices: ${answer.body.slice(0, 200)}` };
  const events = answer.body.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
  if (events.at(-1) === "[DONE]") return { kind: "ok (stream)" };
  const last = events.at(-1);
  if (last && jsonError(`${last}`)) return { kind: "failed", problem: `stream ended with an error event: ${last}` };
  return { kind: "truncated stream", problem: `stream cut without [DONE] or an error event after ${events.length} events` };
}

function jsonError(text: string): { code: string; message: string } | undefined {
  try {
    const error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown; type?: unknown } }).error;
    return error && typeof error.message === "string" && typeof error.type === "string" ? { code: String(error.code), message: error.message } : undefined;
  } catch {
    return undefined;
  }
}

/** POSTs `body`; with `abandon`, hangs up once the first chunk of the answer has arrived. */
function send(target: Target, path: string, body: string, abandon: boolean): Promise<Answer> {
  return new Promise((resolve) => {
    const where = "url" in target ? { host: "127.0.0.1", port: Number(new URL(target.url).port) } : { socketPath: target.socketPath };
    let outgoing: ClientRequest | undefined;
    let status = 0;
    let contentType = "";
    let text = "";
    const done = (error?: Error) => resolve({ status, contentType, body: text, ...(error ? { error } : {}) });
    outgoing = request({ ...where, method: "POST", path, agent: false, headers: { "content-type": "application/json" } }, (response) => {
      status = response.statusCode ?? 0;
      contentType = String(response.headers["content-type"] ?? "");
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        text += chunk;
        if (abandon) outgoing!.destroy();
      });
      response.once("end", () => done());
      response.once("error", (error) => done(error));
      response.once("close", () => done());
    });
    outgoing.once("error", (error) => done(error));
    outgoing.end(body);
  });
}

function withDeadline<T>(work: Promise<T>, ms: number, late: () => T): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<T>((resolve) => (timer = setTimeout(() => resolve(late()), ms)));
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

import { homedir } from "node:os";
import { join } from "node:path";
import { Agent } from "undici";
import { textAtMost } from "../http/body.ts";

// The command's only door to the model runner: its HTTP API, over the server's Unix socket by
// default (with Docker Model Runner's path prefix), or over TCP at `--host` / `MODEL_RUNNER_HOST`.
// Every failure becomes a CliError with one line for people and the exit status to leave with.

export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}

export type Target = { kind: "unix"; path: string } | { kind: "tcp"; url: string };

export type ClientOptions = { host?: string; socket?: string; apiKey?: string };

/** Over the Unix socket, the server's paths carry DMR's prefix (see UNIX_SOCKET_PREFIX in the server). */
const SOCKET_PREFIX = "/exp/vDD4.40";

/** Where to call: `--host`, then MODEL_RUNNER_HOST (a URL), then the socket the server listens on by default. */
export function targetOf(options: ClientOptions, env: Record<string, string | undefined>): Target {
  const host = options.host ?? (env.MODEL_RUNNER_HOST?.includes("://") ? env.MODEL_RUNNER_HOST : undefined);
  if (host) return { kind: "tcp", url: host.replace(/\/+$/, "") };
  const path = options.socket ?? env.MODEL_RUNNER_SOCK ?? env.RUNNER_SOCKET ?? join(homedir(), ".llamadock", "model-runner.sock");
  return { kind: "unix", path };
}

export const describeTarget = (t: Target) => (t.kind === "unix" ? `unix:${t.path}` : t.url);

type Bun = { fetch(url: string, init: RequestInit & { unix?: string; timeout?: boolean }): Promise<Response> };

/**
 * fetch over a Unix socket (`path`) or TCP, with no time limit on a quiet answer (a followed log,
 * a long prompt): Bun's own fetch with its 5-minute idle limit lifted, or under Node undici's,
 * whose header and body timeouts (5 minutes too) are turned off.
 */
function fetchVia(path?: string): typeof fetch {
  const bun = (globalThis as { Bun?: Bun }).Bun;
  if (bun) return ((url: string, init: RequestInit = {}) => bun.fetch(url, { ...init, timeout: false, ...(path ? { unix: path } : {}) })) as typeof fetch;
  const dispatcher = new Agent({ ...(path ? { connect: { socketPath: path } } : {}), headersTimeout: 0, bodyTimeout: 0 });
  return ((url: string, init: RequestInit = {}) => fetch(url, { ...init, dispatcher } as RequestInit)) as typeof fetch;
}

export type ApiError = { status: number; code: string; message: string };

/**
 * What an answer the command reads whole may weigh (the model list, usage, a fit): far more than
 * any, and a bound on a server at `--host` that would send without end.
 */
const ANSWER_LIMIT = 64 << 20;

/** An answer's body as text, read up to ANSWER_LIMIT bytes. */
export const answerText = (response: Response): Promise<string> =>
  textAtMost(response, ANSWER_LIMIT, () => new CliError(`the model runner's answer is larger than ${ANSWER_LIMIT >> 20} MiB`));

/** An answer's JSON, read up to ANSWER_LIMIT bytes. */
export const answerJson = async <T>(response: Response): Promise<T> => JSON.parse(await answerText(response)) as T;

export type Client = {
  target: Target;
  /** The answer whatever its status; a server that cannot be reached is a CliError saying how to start one. */
  raw(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response>;
  /** Sends `body` as it is read (a model archive), with these headers; the answer whatever its status. */
  upload(method: string, path: string, body: ReadableStream<Uint8Array>, headers: Record<string, string>, signal?: AbortSignal): Promise<Response>;
  /** The answer's JSON; an error status is a CliError with the server's message. */
  json<T = unknown>(method: string, path: string, body?: unknown, model?: string): Promise<T>;
};

export function createClient(options: ClientOptions, env: Record<string, string | undefined> = process.env): Client {
  const target = targetOf(options, env);
  const apiKey = options.apiKey ?? env.MODEL_RUNNER_API_KEY;
  const send = fetchVia(target.kind === "unix" ? target.path : undefined);
  const base = target.kind === "unix" ? `http://localhost${SOCKET_PREFIX}` : target.url;

  async function request(method: string, path: string, init: { headers: Record<string, string>; body?: BodyInit }, signal?: AbortSignal): Promise<Response> {
    const headers = { ...init.headers, ...(apiKey && target.kind === "tcp" ? { authorization: `Bearer ${apiKey}` } : {}) };
    // `duplex` lets Node's fetch send a stream (Bun's needs no word for it).
    const streamed = init.body instanceof ReadableStream ? { duplex: "half" } : {};
    try {
      return await send(base + path, { method, headers, ...(init.body === undefined ? {} : { body: init.body }), ...streamed, ...(signal ? { signal } : {}) } as RequestInit);
    } catch (error) {
      if (signal?.aborted) throw error;
      throw unreachable(target, error);
    }
  }

  const raw = (method: string, path: string, body?: unknown, signal?: AbortSignal) =>
    request(method, path, body === undefined ? { headers: {} } : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }, signal);

  async function json<T>(method: string, path: string, body?: unknown, model?: string): Promise<T> {
    const response = await raw(method, path, body);
    if (!response.ok) throw await failure(response, model);
    return answerJson<T>(response);
  }

  const upload = (method: string, path: string, body: ReadableStream<Uint8Array>, headers: Record<string, string>, signal?: AbortSignal) =>
    request(method, path, { headers, body }, signal);

  return { target, raw, upload, json };
}

function unreachable(target: Target, error: unknown): CliError {
  const cause = (error as { cause?: { code?: string }; code?: string }) ?? {};
  const code = cause.cause?.code ?? cause.code ?? (error as Error).message;
  return new CliError(
    `cannot reach the model runner at ${describeTarget(target)} (${code}): is it running? Start it with \`llamadock serve\` (or \`npm start\`), or point --host / MODEL_RUNNER_HOST at it`,
  );
}

/** The server's error envelope as a CliError, with a hint where one helps. */
export async function failure(response: Response, model?: string): Promise<CliError> {
  const error = await apiError(response);
  if (error.code === "model_not_found" && model) return new CliError(`model ${model} not found: pull it first with \`llamadock pull ${model}\``);
  if (error.status === 401) return new CliError(`${error.message}: set MODEL_RUNNER_API_KEY or pass --api-key`);
  return new CliError(error.message);
}

export async function apiError(response: Response): Promise<ApiError> {
  const text = await answerText(response);
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string } };
    return { status: response.status, code: body.error?.code ?? "", message: body.error?.message ?? text };
  } catch {
    return { status: response.status, code: "", message: `${response.status} ${text.slice(0, 200)}` };
  }
}

/** The body's lines as they arrive (NDJSON, server-sent events, a log). */
export async function* lines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    pending += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = pending.indexOf("\n")) >= 0) {
      yield pending.slice(0, end);
      pending = pending.slice(end + 1);
    }
  }
  if (pending) yield pending;
}

/** A model reference as one URL path: its slashes stay, everything else is escaped. */
export const modelPath = (reference: string) => reference.split("/").map(encodeURIComponent).join("/");

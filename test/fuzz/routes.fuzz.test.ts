import { createServer } from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildServices, type Service } from "../../src/app.ts";
import { UNIX_SOCKET_PREFIX } from "../../src/model-runner.ts";
import { logRoutes } from "../../src/inference/logs.ts";
import { webRoutes } from "../../src/web/routes.ts";
import { loadConfig } from "../../src/config.ts";
import { engineRoutes } from "../../src/inference/engines.ts";
import { createMetrics } from "../../src/inference/metrics.ts";
import { anthropicRoutes } from "../../src/dialects/anthropic/routes.ts";
import { createResponseStore, responsesRoutes } from "../../src/dialects/responses.ts";
import { ollamaRoutes } from "../../src/dialects/ollama/routes.ts";
import { rerankRoutes } from "../../src/dialects/rerank.ts";
import { inferenceRoutes } from "../../src/inference/routes.ts";
import { createModelStore, modelRoutes } from "../../src/models/index.ts";
import type { Route } from "../../src/http/router.ts";
import { detectRuntime } from "../../src/runtime/index.ts";

// Property-based fuzzing of every route of both services, in process: random methods, paths built
// from the route tables with random segments and escapes, query strings, JSON and non-JSON bodies.
// Whatever comes in, an answer comes back in time, it is never a 500 (but for the documented
// `pull_failed` of a pull whose registry cannot be reached), and every error is the JSON envelope
// {"error":{"message","type","code"}}. Every upstream (registry, Hugging Face, photo
// service) is a closed loopback port and no llama-server exists, so nothing leaves the machine.

const SEED = 42;
const RUNNER_RUNS = 4000;
const ALBUM_RUNS = 1000;
/** The longest any single answer (headers and whole body) may take. */
const ANSWER_LIMIT_MS = 4000;

const SEEDED_TAG = "ai/fuzz:latest";

let dir: string;
let closedPort: number;
let services: Service[];
let runner: Service;
let album: Service;
let reseed: () => Promise<void>;
const realFetch = globalThis.fetch;
const savedLlamaServerPath = process.env.LLAMA_SERVER_PATH;
/** URLs the services tried to reach beyond the closed loopback port (refused here, never sent). */
const blocked: string[] = [];
const statuses = new Map<string, number>();

/** A loopback port that nothing listens on: bound once by us, then closed. */
async function freeClosedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-fuzz-"));
  closedPort = await freeClosedPort();
  const closed = `127.0.0.1:${closedPort}`;
  // A name with an explicit registry (`docker.io/…`, `example.com/…`) would go to that host: such a
  // fetch fails here as it would on a machine without a network, and only the closed port is tried.
  globalThis.fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.host === closed) return realFetch(input, init);
    blocked.push(url.origin);
    throw new TypeError("fetch failed", { cause: Object.assign(new Error(`connect ENETUNREACH ${url.host}`), { code: "ENETUNREACH" }) });
  }) as typeof fetch;
  // The binary is looked up in the process's environment, not the configuration's.
  process.env.LLAMA_SERVER_PATH = join(dir, "no-llama-server");
  const env = {
    MODELS_PATH: join(dir, "models"),
    INFERENCE_RUNTIME_DIR: join(dir, "run"),
    INFERENCE_LOG_DIR: join(dir, "logs"),
    INFERENCE_SETTINGS_PATH: join(dir, "engine-settings.json"),
    INFERENCE_BODY_LIMIT: String(256 * 1024),
    RUNNER_SOCKET: "none",
    DEFAULT_REGISTRY: closed,
    HF_ENDPOINT: `http://${closed}`,
    PHOTOS_API_BASE_URL: `http://${closed}`,
    PHOTOS_API_TIMEOUT_MS: "2000",
    LLAMA_SERVER_PATH: join(dir, "no-llama-server"),
  };
  const config = loadConfig(env, []);
  services = await buildServices(config, await detectRuntime());
  runner = services.find((s) => s.name === "model runner")!;
  album = services.find((s) => s.name === "album")!;
  expect(runner && album).toBeTruthy();

  // One model in the store, so lookups, tags, deletes and loads get past "not found".
  const store = createModelStore(config.models.path, { defaultRegistry: config.models.defaultRegistry });
  const weights = new TextEncoder().encode("GGUF: not really, no runner ever reads it");
  reseed = async () => {
    if (await store.resolve(SEEDED_TAG)) return;
    const gguf = await store.putBlob(weights);
    await store.add({ manifest: new TextEncoder().encode('{"fuzz":true}'), tag: SEEDED_TAG, created: 0, config: { format: "gguf" }, files: { gguf: [gguf] } });
  };
  await reseed();
});

afterAll(async () => {
  for (const service of services ?? []) await service.stop?.();
  globalThis.fetch = realFetch;
  if (savedLlamaServerPath === undefined) delete process.env.LLAMA_SERVER_PATH;
  else process.env.LLAMA_SERVER_PATH = savedLlamaServerPath;
  if (dir) await rm(dir, { recursive: true, force: true });
  console.log(`answers seen (service:status/code×count): ${[...statuses].sort().map(([k, n]) => `${k}×${n}`).join(" ")}`);
  console.log(`fetches refused (explicit registries): ${blocked.length}`);
});

// ---- The route tables, read from the code (built with inert dependencies: only paths are used).

function runnerRouteTable(): Route[] {
  const inert = {} as never;
  const metrics = createMetrics();
  return [
    ...modelRoutes({
      store: createModelStore(join(dir, "unused")),
      registry: { fetch: inert, insecureHosts: [], credentials: {} },
      hub: { fetch: inert, endpoint: "http://127.0.0.1:9" },
    }),
    ...inferenceRoutes({ metrics, bodyLimit: 1 } as unknown as Parameters<typeof inferenceRoutes>[0]),
    ...engineRoutes({ metrics } as unknown as Parameters<typeof engineRoutes>[0]),
    ...anthropicRoutes({ metrics } as unknown as Parameters<typeof anthropicRoutes>[0]),
    ...responsesRoutes({ metrics } as unknown as Parameters<typeof responsesRoutes>[0], createResponseStore({ maxEntries: 1, maxBytes: 1, maxAgeMs: 1 }), () => ""),
    ...rerankRoutes({ metrics } as unknown as Parameters<typeof rerankRoutes>[0]),
    ...ollamaRoutes({} as Parameters<typeof ollamaRoutes>[0]),
    ...logRoutes({} as Parameters<typeof logRoutes>[0]),
    ...webRoutes({} as Parameters<typeof webRoutes>[0]),
    // app.ts's own routes (its table is not exported).
    { method: "GET", path: "/", handle: inert },
    { method: "GET", path: "/version", handle: inert },
  ];
}

/** Paths that answer in Ollama's shape, `{"error": "..."}`. */
const OLLAMA_PATHS = new Set(ollamaRoutes({} as Parameters<typeof ollamaRoutes>[0]).map((r) => r.path));

/** Paths that answer in Anthropic's envelope. */
const ANTHROPIC_PATHS = new Set(anthropicRoutes({} as Parameters<typeof anthropicRoutes>[0]).map((r) => r.path));

/** The album service's one route (see src/album/handler.ts). */
const ALBUM_ROUTES: Pick<Route, "method" | "path">[] = [{ method: "GET", path: "/api/albums/:albumId?" }];

// ---- Arbitraries.

const HEX = fc.constantFrom(..."0123456789abcdef");
const hex = (n: number) => fc.string({ unit: HEX, minLength: n, maxLength: n });

const NAMES = ["ai", "fuzz", "ai/fuzz", "AI/Fuzz", "smollm2", "absent", "llama.cpp", "vllm", "v1", "models", "tag", "create", "hf.co", "huggingface.co", "org", "Repo-GGUF:Q4_K_M", "latest", "localhost:5000", "docker.io"];
const ALBUM_IDS = ["1", "0", "-1", "007", "+1", "1e3", "0x10", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "1.5", " 1", "１"];
const ESCAPES = ["%", "%2", "%zz", "%E0%A4%A", "%C0%AF", "%FF", "%00", "%2e%2e", "%2E", "%2f", "%2F", "%5c", "%3A", "%40", "%25", "%20", "%0a", "%F0%9F%98%80"];
const TRAPS = ["..", ".", "", "\\", "sha256:", "@", ":", ";", "~", "*", "'", '"', "<x>", "\u212a", "\u00e9", "\u{1f600}", "\u0000"];

/** One path segment: a name, an id, an escape (valid or not), a trap, or random text. */
const segment = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(...NAMES) },
  { weight: 2, arbitrary: fc.constantFrom(...ALBUM_IDS) },
  { weight: 3, arbitrary: fc.array(fc.oneof(fc.constantFrom(...ESCAPES), fc.constantFrom(...TRAPS), fc.stringMatching(/^[a-z0-9]{1,6}$/)), { minLength: 1, maxLength: 5 }).map((p) => p.join("")) },
  { weight: 1, arbitrary: hex(64).map((h) => `sha256:${h}`) },
  { weight: 1, arbitrary: hex(12) },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 12 }).map(encodeURIComponent) },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme-ascii", maxLength: 12 }) },
  { weight: 1, arbitrary: fc.integer({ min: 300, max: 3000 }).map((n) => "a".repeat(n)) },
);

/** A route's path with every parameter (`:name`, `:name+`, `:name?`, `*`) filled with random segments. */
function fillPath(template: string, param: fc.Arbitrary<string> = segment): fc.Arbitrary<string> {
  const parts = template.split("/").map((part): fc.Arbitrary<string[]> => {
    if (part === "*" || part.endsWith("+")) return fc.array(param, { minLength: 1, maxLength: 3 });
    if (part.startsWith(":") && part.endsWith("?")) return fc.array(param, { maxLength: 1 });
    if (part.startsWith(":")) return param.map((s) => [s]);
    return fc.constant([part]);
  });
  return fc.tuple(...parts).map((filled) => filled.flat().join("/"));
}

/** A path mutated the ways clients and attackers mangle them. */
const mutate = (path: fc.Arbitrary<string>) =>
  fc
    .tuple(path, fc.oneof({ weight: 14, arbitrary: fc.constant("none") }, { weight: 6, arbitrary: fc.constantFrom("trailing", "double", "upper", "extra", "dots") }), segment)
    .map(([p, how, extra]) => {
      switch (how) {
        case "trailing": return `${p}/`;
        case "double": return p.replace("/", "//");
        case "upper": return p.toUpperCase();
        case "extra": return `${p}/${extra}`;
        case "dots": return `${p}/../${extra}`;
        default: return p;
      }
    });

const JUNK_METHOD = fc.stringMatching(/^[A-Za-z]{1,10}$/).filter((m) => !["CONNECT", "TRACE", "TRACK"].includes(m.toUpperCase()));
const method = (own: string) =>
  fc.oneof({ weight: 10, arbitrary: fc.constant(own) }, { weight: 4, arbitrary: fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD") }, { weight: 1, arbitrary: JUNK_METHOD });

const query = fc.oneof(
  { weight: 3, arbitrary: fc.constant("") },
  {
    weight: 3,
    arbitrary: fc
      .array(fc.tuple(fc.constantFrom("force", "repo", "tag", "model", "x", ""), fc.oneof(fc.constantFrom("true", "false", "", "ai/fuzz", "myorg/copy", "v1", "-bad", "ai/fuzz:latest", "..", "a b"), segment)), { maxLength: 3 })
      .map((pairs) => `?${pairs.map(([k, v]) => `${k}=${v}`).join("&")}`),
  },
  { weight: 1, arbitrary: fc.array(fc.constantFrom(...ESCAPES, "=", "&", "?", "repo", "tag"), { maxLength: 6 }).map((p) => `?${p.join("")}`) },
);

// ---- Bodies: random JSON, objects with the fields the routes read, non-JSON bytes, huge strings.

const modelName = fc.oneof(
  fc.constantFrom("ai/fuzz", "fuzz", "ai/fuzz:latest", "AI/FUZZ", "ai/absent", "absent:v9", "hf.co/org/repo", "huggingface.co/Org/Repo:Q4_K_M", "docker.io/ai/x", "example.com/a/b", "localhost:5000/ai/tiny", "../../x", "ai/x y", "", " ", "sha256:", "aaaaaaaaaaaa"),
  hex(64).map((h) => `sha256:${h}`),
  segment,
);
const tokens = fc.array(fc.oneof(fc.integer(), fc.double()), { maxLength: 4 });
const FIELD_VALUES: Record<string, fc.Arbitrary<unknown>> = {
  model: modelName,
  from: modelName,
  messages: fc.oneof(
    fc.array(fc.record({ role: fc.oneof(fc.constantFrom("user", "system", "assistant", ""), fc.jsonValue()), content: fc.oneof(fc.string(), fc.constant(null), fc.array(fc.jsonValue(), { maxLength: 2 }), fc.jsonValue()) }, { requiredKeys: [] }), { maxLength: 3 }),
    fc.jsonValue(),
  ),
  prompt: fc.oneof(fc.string(), fc.array(fc.string(), { maxLength: 3 }), tokens, fc.array(tokens, { maxLength: 2 })),
  input: fc.oneof(fc.string(), fc.array(fc.string(), { maxLength: 3 }), tokens),
  stream: fc.oneof(fc.boolean(), fc.constantFrom("true", 1, null)),
  all: fc.oneof(fc.boolean(), fc.constantFrom("true", 1)),
  backend: fc.constantFrom("", "llama.cpp", "vllm", 3),
  models: fc.oneof(fc.array(modelName, { maxLength: 3 }), fc.constantFrom("ai/fuzz", [], [1])),
  mode: fc.constantFrom("completion", "embedding", "chat", 1),
  "context-size": fc.oneof(fc.constantFrom(-2, -1, 0, 128, 4096, 2 ** 31, 2 ** 53, 1.5, Number.MAX_VALUE), fc.integer()),
  slots: fc.oneof(fc.integer({ min: -2, max: 100 }), fc.constant("4")),
  threads: fc.oneof(fc.integer({ min: -2, max: 2000 }), fc.double()),
  "runtime-flags": fc.oneof(fc.array(fc.constantFrom("--ctx-size", "4096", "--model", "../x.gguf", "--port", "1", "-ngl", "99", "--temp", "0.5", "", "--log-file"), { maxLength: 4 }), fc.jsonValue()),
  "raw-runtime-flags": fc.oneof(fc.constantFrom("--temp 0.5", "--ctx-size 4096 | cat", "$(id)", "'unclosed", "a && b", "--model ../x.gguf", ""), fc.string()),
  keep_alive: fc.oneof(fc.constantFrom("5m", "0", "-1", "10s", "1h30m", "soon", "", "-5m", "99999999h"), fc.integer(), fc.double()),
  pooling: fc.constantFrom("mean", "cls", "last", "rank", "max", null),
  speculative: fc.oneof(fc.record({ draft_model: modelName, num_tokens: fc.integer({ min: -1, max: 100 }), min_acceptance_rate: fc.double() }, { requiredKeys: [] }), fc.jsonValue()),
  llamacpp: fc.oneof(fc.record({ "reasoning-budget": fc.oneof(fc.integer({ min: -3, max: 5 }), fc.jsonValue()) }), fc.jsonValue()),
  "bearer-token": fc.oneof(fc.string(), fc.constant("")),
};

/** Fields llama-server would act on that the body policy (src/inference/body-policy.ts) polices. */
const policed = fc.dictionary(
  fc.constantFrom("n_discard", "n_keep", "n_probs", "id_slot", "n", "n_cmpl", "temperature", "max_tokens"),
  fc.oneof(fc.integer({ min: -3, max: 30 }), fc.constantFrom(-1, 0, 1, 8, 9, 20, 21, 1.5, 2 ** 53, -(2 ** 31), "1", null, true, [])),
  { maxKeys: 3 },
);
const MEDIA_URLS = ["data:image/png;base64,AAAA", "file:///x.png", "unix:/x.sock", "http://127.0.0.1/x.png", "http://[::1]:1/x", "http://10.0.0.1/x", "http://169.254.169.254/latest", "https://example.com/a.png", "not a url", "", "javascript:1"];
const mediaPart = fc.oneof(
  fc.constantFrom(...MEDIA_URLS).map((url) => ({ type: "image_url", image_url: { url } })),
  fc.constantFrom(...MEDIA_URLS).map((url) => ({ type: "image_url", image_url: url })),
  fc.constantFrom(...MEDIA_URLS).map((url) => ({ type: "input_audio", input_audio: { url } })),
  fc.constantFrom(...MEDIA_URLS).map((file_url) => ({ type: "file", file: { file_url } })),
  fc.constantFrom(...MEDIA_URLS).map((url) => ({ type: "image", source: { url } })),
  fc.jsonValue({ maxDepth: 2 }),
);
const chatMessages = fc.array(
  fc.record({ role: fc.constantFrom("user", "system", "assistant"), content: fc.oneof(fc.string({ maxLength: 20 }), fc.array(fc.oneof(mediaPart, fc.record({ type: fc.constant("text"), text: fc.string() })), { maxLength: 3 })) }),
  { minLength: 1, maxLength: 3 },
);
const fieldObject = fc
  .tuple(
    fc.subarray(Object.keys(FIELD_VALUES)).chain((keys) => fc.tuple(...keys.map((k) => FIELD_VALUES[k]!.map((v) => [k, v] as const)))),
    fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 2 }),
  )
  .map(([pairs, extra]) => ({ ...extra, ...Object.fromEntries(pairs) }));

type Body = { text?: string; bytes?: Uint8Array<ArrayBuffer>; contentType?: string; contentLength?: string };

const bodyPayload: fc.Arbitrary<Pick<Body, "text" | "bytes">> = fc.oneof(
  { weight: 1, arbitrary: fc.constant({}) },
  { weight: 5, arbitrary: fieldObject.map((o) => ({ text: JSON.stringify(o) })) },
  { weight: 2, arbitrary: fc.jsonValue().map((v) => ({ text: JSON.stringify(v) })) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((bytes) => ({ bytes })) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 64 }).map((text) => ({ text })) },
  { weight: 1, arbitrary: fc.constantFrom("{", '{"model":', "[", "null", "\ufeff{}", '{"from":"ai/fuzz"}{"x":1}', "").map((text) => ({ text })) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.integer({ min: 60 * 1024, max: 300 * 1024 }), fc.constantFrom("raw", "from", "model"))
      .map(([n, kind]) => ({ text: kind === "raw" ? "x".repeat(n) : JSON.stringify({ [kind]: "ai/fuzz", messages: [{ role: "user", content: "y".repeat(n) }] }) })),
  },
);

const body: fc.Arbitrary<Body> = fc
  .tuple(
    bodyPayload,
    fc.option(fc.constantFrom("application/json", "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1", "")),
    fc.option(fc.oneof(fc.constantFrom("true-length", "0", "-1", "abc", "1e9", "99999999999999999999"), fc.nat().map(String))),
  )
  .map(([payload, contentType, contentLength]) => {
    const size = payload.bytes?.byteLength ?? (payload.text === undefined ? 0 : new TextEncoder().encode(payload.text).byteLength);
    return {
      ...payload,
      ...(contentType !== null ? { contentType } : {}),
      ...(contentLength !== null ? { contentLength: contentLength === "true-length" ? String(size) : contentLength } : {}),
    };
  });

type Case = { method: string; path: string; body: Body };

const withPrefix = (prefixes: string[], path: fc.Arbitrary<string>) =>
  fc.tuple(fc.constantFrom(...prefixes), path, query).map(([prefix, p, q]) => `${prefix}${p}${q}`);

/** Paths no route knows. */
const unknownPath = (prefixes: string[]) => withPrefix(prefixes, fc.array(segment, { maxLength: 4 }).map((segs) => `/${segs.join("/")}`));

const json = (value: fc.Arbitrary<unknown>): fc.Arbitrary<Body> =>
  fc.tuple(value, fc.option(fc.constant("application/json"), { nil: undefined })).map(([v, contentType]) => ({ text: JSON.stringify(v), ...(contentType ? { contentType } : {}) }));

/** The model runner: every route, and more often the two that reach furthest (a pull, an inference). */
function runnerCases(routes: Pick<Route, "method" | "path">[]): fc.Arbitrary<Case> {
  const prefixes = ["", UNIX_SOCKET_PREFIX];
  const inferencePaths = routes.filter((r) => r.method === "POST" && /\/v1\/(chat\/completions|completions|embeddings|messages(\/count_tokens)?|responses)$/.test(r.path)).map((r) => r.path);
  return fc.oneof(
    ...routes.map((route) => ({
      weight: 3,
      arbitrary: fc.record({ method: method(route.method), path: withPrefix(prefixes, mutate(fillPath(route.path))), body }),
    })),
    {
      // A pull: every registry is unreachable, so it must fail, and fail in time.
      weight: 12,
      arbitrary: fc.record({
        method: fc.constant("POST"),
        path: withPrefix(prefixes, fc.constant("/models/create")),
        body: json(fc.record({ from: modelName, "bearer-token": fc.string({ minLength: 1, maxLength: 20 }) }, { requiredKeys: ["from"] })),
      }),
    },
    {
      // An inference request past validation: the model exists, no llama-server does.
      weight: 12,
      arbitrary: fc.record({
        method: fc.constant("POST"),
        path: withPrefix(prefixes, fc.constantFrom(...inferencePaths)),
        body: json(
          fc
            .tuple(fc.oneof({ weight: 3, arbitrary: fc.constantFrom("ai/fuzz", "fuzz", "AI/FUZZ:latest") }, { weight: 1, arbitrary: modelName }), chatMessages, fc.oneof(fc.string(), fc.array(fc.integer(), { maxLength: 3 })), fc.option(fc.boolean()), policed)
            .map(([model, messages, text, stream, extra]) => ({ ...extra, model, messages, prompt: text, input: text, ...(stream === null ? {} : { stream }) })),
        ),
      }),
    },
    { weight: 6, arbitrary: fc.record({ method: method("GET"), path: unknownPath(prefixes), body }) },
  );
}

/** Album ids: mostly ids, some of them valid 64-bit integers, and every other kind of segment. */
const albumId = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...ALBUM_IDS) },
  { weight: 4, arbitrary: fc.bigInt({ min: -(2n ** 64n), max: 2n ** 64n }).map(String) },
  { weight: 3, arbitrary: segment },
);

function albumCases(routes: Pick<Route, "method" | "path">[]): fc.Arbitrary<Case> {
  return fc.oneof(
    ...routes.map((route) => ({
      weight: 6,
      arbitrary: fc.record({ method: method(route.method), path: withPrefix([""], mutate(fillPath(route.path, albumId))), body }),
    })),
    { weight: 1, arbitrary: fc.record({ method: method("GET"), path: unknownPath([""]), body }) },
  );
}

// ---- Running one case and checking its answer.

function request(c: Case): Request {
  const headers = new Headers();
  if (c.body.contentType) headers.set("content-type", c.body.contentType);
  if (c.body.contentLength) headers.set("content-length", c.body.contentLength);
  const canHaveBody = !["GET", "HEAD"].includes(c.method.toUpperCase());
  const payload = canHaveBody ? (c.body.bytes ?? c.body.text) : undefined;
  return new Request(`http://fuzz.test${c.path}`, { method: c.method, headers, ...(payload !== undefined ? { body: payload } : {}) });
}

/** The answer and its whole body, or a failure when it takes longer than `ANSWER_LIMIT_MS`. */
async function answer(service: Service, c: Case): Promise<{ response: Response; text: string }> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no complete answer within ${ANSWER_LIMIT_MS} ms`)), ANSWER_LIMIT_MS);
  });
  try {
    return await Promise.race([
      (async () => {
        const response = await service.handler(request(c));
        // An events stream never ends: its first event is its whole answer here.
        if (response.headers.get("content-type") === "text/event-stream") return { response, text: await firstEvent(response) };
        return { response, text: await response.text() };
      })(),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function firstEvent(response: Response): Promise<string> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!/^event: .*\n(data: .*\n)+\n/m.test(text)) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  await reader.cancel();
  return text;
}

/** An error status with an empty body is the album service's contract for an upstream error status. */
const UPSTREAM_STATUS_PASSED_ON = (service: Service, status: number, text: string) =>
  service === album && text === "" && ![400, 404, 405, 499, 502, 504].includes(status);

function check(service: Service, c: Case, response: Response, text: string): void {
  const where = `${c.method} ${c.path}`;
  const { status } = response;
  const type = response.headers.get("content-type") ?? "";
  const code = status >= 400 ? (/"code":"([^"]*)"/.exec(text)?.[1] ?? "-") : "";
  const seen = `${service === album ? "album" : "runner"}:${status}${code && `/${code}`}`;
  statuses.set(seen, (statuses.get(seen) ?? 0) + 1);
  // Never a 500: every failure is one of our errors (an upstream's is a 502).
  expect(status, `${where} -> ${status} ${text.slice(0, 300)}`).not.toBe(500);
  expect(status).toBeGreaterThanOrEqual(200);
  expect(status).toBeLessThan(600);
  if (status >= 400) {
    if (UPSTREAM_STATUS_PASSED_ON(service, status, text)) return;
    expect(type, `${where} -> ${status} content-type`).toMatch(/^application\/json/);
    let parsed: unknown;
    expect(() => (parsed = JSON.parse(text)), `${where} -> ${status} body ${JSON.stringify(text.slice(0, 200))}`).not.toThrow();
    // Anthropic's routes answer in its envelope, Ollama's in its shape; every other route in OpenAI's.
    const route = routePath(c.path);
    const shape =
      c.method === "POST" && ANTHROPIC_PATHS.has(route)
        ? { type: "error", error: { message: expect.any(String), type: expect.any(String) } }
        : OLLAMA_PATHS.has(route) && status !== 405
          ? { error: expect.any(String) }
          : { error: { message: expect.any(String), type: expect.any(String), code: expect.any(String) } };
    expect(parsed, `${where} -> ${status}`).toEqual(shape);
    if (status === 405) expect(response.headers.get("allow"), `${where} -> 405 without Allow`).toBeTruthy();
    return;
  }
  if (type.startsWith("application/json")) {
    expect(() => JSON.parse(text), `${where} -> ${status} JSON body ${JSON.stringify(text.slice(0, 200))}`).not.toThrow();
  } else if (type.startsWith("application/x-ndjson") && OLLAMA_PATHS.has(routePath(c.path))) {
    // Ollama's pull progress: status lines, ending with success or an error line.
    const lines = text.split("\n").filter(Boolean).map((line) => JSON.parse(line) as { status?: unknown; error?: unknown });
    for (const line of lines) expect(typeof (line.status ?? line.error), `${where} line ${JSON.stringify(line)}`).toBe("string");
    const last = lines.at(-1)!;
    expect(last.status === "success" || typeof last.error === "string", `${where}: the stream must end with success or error`).toBe(true);
  } else if (type.startsWith("application/x-ndjson")) {
    const lines = text.split("\n").filter(Boolean);
    expect(lines.length, `${where} -> an empty progress stream`).toBeGreaterThan(0);
    for (const line of lines) {
      const event = JSON.parse(line) as { type?: unknown; message?: unknown };
      expect(typeof event.type, `${where} line ${line.slice(0, 200)}`).toBe("string");
      expect(typeof event.message, `${where} line ${line.slice(0, 200)}`).toBe("string");
    }
    expect(JSON.parse(lines.at(-1)!).type, `${where}: the stream must end with success or error`).toMatch(/^(success|error)$/);
  }
}

/** A case's path as its route table names it (no prefix, no trailing slash, no query). */
const routePath = (path: string) => new URL(`http://fuzz.test${path}`).pathname.replace(/\/$/, "").replace(UNIX_SOCKET_PREFIX, "");

const property = (service: () => Service, arbitrary: fc.Arbitrary<Case>) =>
  fc.asyncProperty(arbitrary, async (c) => {
    await reseed();
    const s = service();
    const { response, text } = await answer(s, c);
    check(s, c, response, text);
  });

describe("every route under fuzzing: an answer in time, no unhandled 500, errors in the JSON envelope", () => {
  it(`the model runner (${RUNNER_RUNS} requests)`, async () => {
    const routes = runnerRouteTable();
    expect(routes.length).toBeGreaterThan(10);
    await fc.assert(property(() => runner, runnerCases(routes)), { seed: SEED, numRuns: RUNNER_RUNS });
  });

  it(`the album service (${ALBUM_RUNS} requests)`, async () => {
    await fc.assert(property(() => album, albumCases(ALBUM_ROUTES)), { seed: SEED, numRuns: ALBUM_RUNS });
  });
});

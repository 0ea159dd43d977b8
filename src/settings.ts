import { availableParallelism, homedir } from "node:os";
import { join } from "node:path";
import * as z from "zod";
import { KEEP_ALIVE_PATTERN, keepAliveMs } from "./scheduler/policy.ts";
import { BYTES_PATTERN, parseBytes } from "./scheduler/memory/budget.ts";

// What may be set: every setting's name, default and check, as one schema (config.ts shapes what
// it reads into the configuration the wiring gets), and the names Docker Model Runner gives some.

const port = z.coerce.number().int().min(0).max(65535);

const baseUrl = z
  .url({ protocol: /^https?$/, error: "must be an http(s) URL" })
  .refine((value) => !/[?#]/.test(value), "must not carry a query or a fragment")
  // A path prefix is kept; a trailing slash is dropped so that joining never doubles it.
  .transform((value) => value.replace(/\/+$/, ""));

/** A size in bytes, written as bytes or with a unit (`64MiB`), at least one byte. */
const size = (fallback: string) =>
  z.string().regex(BYTES_PATTERN, "a size like 4MiB or 1000000").default(fallback).transform(parseBytes).pipe(z.number().int().min(1));

const MIB = 1024 * 1024;

/**
 * The settings whose default is a file or folder in ~/.llamadock, and its name there. The home folder
 * is the environment's HOME where loadConfig is given one (as the system's own lookup does on Unix),
 * else the system's: so reading the album's settings asks the system nothing (Deno without --allow-sys).
 */
export const IN_HOME = {
  RUNNER_SOCKET: "model-runner.sock",
  MODELS_PATH: "models",
  INFERENCE_RUNTIME_DIR: "run",
  INFERENCE_LOG_DIR: "logs",
  INFERENCE_SETTINGS_PATH: "engine-settings.json",
} as const;

export const inHome = (setting: keyof typeof IN_HOME, home = homedir()) => join(home, ".llamadock", IN_HOME[setting]);

const hostList = z.string().transform((value) => value.split(",").map((s) => s.trim().toLowerCase()).filter(Boolean));

const credentialList = z.string().transform((value, context) => {
  const out: Record<string, { username: string; password: string }> = {};
  for (const item of value.split(",").map((s) => s.trim()).filter(Boolean)) {
    const match = /^([^=]+)=([^:]*):(.*)$/s.exec(item);
    if (!match) {
      context.addIssue({ code: "custom", message: "expected host=user:password, comma-separated" });
      return z.NEVER;
    }
    out[match[1]!.trim().toLowerCase()] = { username: match[2]!, password: match[3]! };
  }
  return out;
});

// Defaults that ask the machine (its home folder, its cores) are functions, run when a configuration
// is read: importing this module (the library's entries do) reads nothing.
export const Settings = z.object({
  SERVICES: z.string().default("album,runner").transform((value) => list(value))
    .pipe(z.array(z.enum(["album", "runner"])).min(1)),
  ALBUM_HOST: z.string().min(1).default("127.0.0.1"),
  ALBUM_PORT: port.default(8080),
  // Also listen on this Unix socket (off when unset).
  ALBUM_SOCKET: z.string().min(1).optional(),
  PHOTOS_API_BASE_URL: baseUrl.default("https://jsonplaceholder.typicode.com"),
  PHOTOS_API_TIMEOUT_MS: z.coerce.number().int().positive().default(10_000),
  // The largest photo service answer read (beyond it: 502 upstream_too_large); a size like 4MiB.
  PHOTOS_API_MAX_BYTES: size("4MiB"),
  RUNNER_HOST: z.string().min(1).default("127.0.0.1"),
  RUNNER_PORT: port.default(12434),
  // `none` turns the Unix socket off.
  RUNNER_SOCKET: z.string().default(() => inHome("RUNNER_SOCKET")),
  SHUTDOWN_GRACE_MS: z.coerce.number().int().nonnegative().default(10_000),
  // Slow and numerous clients: time for a request's headers, the silence a request body may keep
  // (no total: a model archive may take hours), connections (Node) or requests in flight (Bun,
  // Deno) per listener.
  HTTP_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(100).default(10_000),
  HTTP_BODY_IDLE_TIMEOUT_MS: z.coerce.number().int().min(100).default(60_000),
  HTTP_MAX_CONNECTIONS: z.coerce.number().int().min(1).default(1024),
  // Who may call (see src/http/guard.ts): names besides loopback ones, browser origins besides the
  // local ones (DMR_ORIGINS and OLLAMA_ORIGINS add to it too), API keys (or a file of them, one a
  // line, so they stay out of `ps`), paths open without a key.
  ALLOWED_HOSTS: hostList.default([]),
  ALLOWED_ORIGINS: z.string().optional(),
  DMR_ORIGINS: z.string().optional(),
  OLLAMA_ORIGINS: z.string().optional(),
  API_KEYS: z.string().optional(),
  API_KEYS_FILE: z.string().min(1).optional(),
  // Each key's limits (0: none) unless its line in API_KEYS_FILE sets its own: at once, per minute.
  KEY_MAX_IN_FLIGHT: z.coerce.number().int().nonnegative().default(0),
  KEY_REQUESTS_PER_MINUTE: z.coerce.number().int().nonnegative().default(0),
  KEY_TOKENS_PER_MINUTE: z.coerce.number().int().nonnegative().default(0),
  // Usage per key, model and day, and batches with their files, kept across restarts (default: beside INFERENCE_SETTINGS_PATH).
  USAGE_PATH: z.string().min(1).optional(),
  // ...bounded, as it is rewritten whole: rows at most (the oldest go first), days kept.
  // The defaults keep the file a few MB at most: a year of 50 key-and-model pairs a day.
  USAGE_MAX_ROWS: z.coerce.number().int().min(1).default(20_000),
  USAGE_KEEP_DAYS: z.coerce.number().int().min(1).default(400),
  BATCHES_PATH: z.string().min(1).optional(),
  // Batches of one key not yet ended (0: no bound), and batches running at once, resumed ones too
  // (the others wait their turn: the key with the fewest running first, then the oldest).
  BATCHES_PER_KEY: z.coerce.number().int().nonnegative().default(10),
  BATCHES_RUNNING: z.coerce.number().int().min(1).default(2),
  // Ended batches' records: kept this long after they ended, and each key's latest so many (0: no
  // bound); older ones go (their output and error files stay the key's, on its quota).
  BATCHES_KEEP: z.string().regex(KEEP_ALIVE_PATTERN, 'a duration like "720h"').refine((v) => !v.startsWith("-") && keepAliveMs(v) > 0, 'a duration like "720h", more than 0').default("720h").transform(keepAliveMs),
  BATCHES_KEPT_PER_KEY: z.coerce.number().int().nonnegative().default(100),
  // OpenAI Files: the largest upload, how long an upload may send nothing, and what each key may
  // keep (its uploads and its batches' results; 0: no bound), admin keys and the Unix socket too.
  FILE_MAX_BYTES: size("200MiB"),
  FILE_UPLOAD_IDLE_TIMEOUT_MS: z.coerce.number().int().min(100).default(30_000),
  KEY_MAX_FILES: z.coerce.number().int().nonnegative().default(100),
  KEY_MAX_FILE_BYTES: z.string().regex(BYTES_PATTERN, "a size like 2GiB or 0 (no bound)").default("2GiB").transform(parseBytes),
  OPEN_PATHS: z.string().default("").transform((value) => value.split(",").map((s) => s.trim()).filter(Boolean)),
  ALLOW_UNAUTHENTICATED_REMOTE: z.enum(["true", "false"]).default("false").transform((v) => v === "true"),
  // Media by http(s) URL in a request (image_url...): off, so a request cannot make the host fetch.
  ALLOW_REMOTE_MEDIA: z.enum(["true", "false"]).default("false").transform((v) => v === "true"),
  // Model management: the store, the registry of names without one, Hugging Face.
  MODELS_PATH: z.string().min(1).default(() => inHome("MODELS_PATH")),
  // How long a process sharing the store may leave one of its locks untouched before another
  // judges it gone and takes the lock over (it touches them every fifteenth of this).
  STORE_LOCK_STALE_MS: z.coerce.number().int().min(1_000).default(30_000),
  DEFAULT_REGISTRY: z.string().regex(/^[\w.-]+(:\d+)?$/, "must be a host[:port]").default("docker.io"),
  // Registries reached over plain HTTP besides loopback and `.local` hosts: `host[:port],...`.
  REGISTRY_INSECURE: hostList.default([]),
  // `host=user:password,...`: credentials for registries that ask for them.
  REGISTRY_CREDENTIALS: credentialList.default({}),
  HF_ENDPOINT: baseUrl.default("https://huggingface.co"),
  HF_TOKEN: z.string().optional(),
  // Pulls that run at once (the others wait their turn), and how long a registry or the Hub may
  // send nothing before a pull fails.
  PULL_MAX_CONCURRENT: z.coerce.number().int().min(1).default(2),
  PULL_STALL_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  // A large blob comes in ranged parts, this many requests at once (1: one stream per blob); a
  // part is never smaller than PULL_PART_MIN_BYTES, so smaller blobs come in one stream.
  PULL_PARTS: z.coerce.number().int().min(1).max(64).default(8),
  PULL_PART_MIN_BYTES: z.coerce.number().int().min(1 << 16).default(16 << 20),
  // Inference: llama-server runners and how requests are scheduled on them.
  INFERENCE_MAX_RUNNERS: z.coerce.number().int().min(1).default(() => Math.min(availableParallelism(), 8)),
  INFERENCE_SLOTS: z.coerce.number().int().min(1).max(64).default(4),
  INFERENCE_QUEUE_DEPTH: z.coerce.number().int().nonnegative().default(64),
  // Of those waiting, how many are handed to llama-server at once to wait in its own queue: a slot
  // that frees starts the next there, without a round trip through us. 12, not 4: with 4, half of
  // 16 short requests in flight waited with us, and our CPU per request was 25-70 µs higher (the
  // same syscalls: we think llama-server's queue ran dry and each hand-over woke it), Node's
  // completions at 0.76 of a bare proxy against 0.87-0.98 (docs/benchmarks.md, eleventh stretch).
  // Requests go ahead only while one key uses the runner and none names a session or has a start
  // (src/scheduler/session-slots.ts): shared runners and agents keep theirs in the fair queue.
  INFERENCE_RUNNER_QUEUE: z.coerce.number().int().nonnegative().max(256).default(12),
  // Compute threads per runner; unset: the CPU cores shared among the runners loaded.
  INFERENCE_THREADS: z.coerce.number().int().min(1).max(1024).optional(),
  INFERENCE_KEEP_ALIVE: z.string().regex(KEEP_ALIVE_PATTERN, 'a duration like "5m", "0" or "-1"').default("5m"),
  // Batch work never evicts a runner that interactive requests used within this (it waits instead):
  // a user between two turns keeps their model loaded. "0": batch work evicts as any request does.
  INFERENCE_BATCH_EVICT_AFTER: z.string().regex(KEEP_ALIVE_PATTERN, 'a duration like "5m" or "0"').refine((v) => !v.startsWith("-"), 'a duration like "5m" or "0", never -1: batch work would wait for good').default("5m").transform(keepAliveMs),
  INFERENCE_BODY_LIMIT: z.coerce.number().int().positive().default(10 * 1024 * 1024),
  // OpenAI Responses kept in memory for previous_response_id and GET /v1/responses/{id}.
  RESPONSES_STORE_SIZE: z.coerce.number().int().min(0).default(1000),
  // ...and no more than this in all (their JSON text); the least recently used go first.
  RESPONSES_STORE_MAX_BYTES: size("64MiB"),
  RESPONSES_STORE_TTL_MS: z.coerce.number().int().positive().default(3_600_000),
  INFERENCE_READY_TIMEOUT_MS: z.coerce.number().int().positive().default(300_000),
  // A runner that stops answering is killed and its model served by a fresh one: its /health must
  // answer within this (asked as often, idle or busy); while it streams it may send nothing for at
  // most the stall timeout, or the prompt timeout while a request waits for its first token.
  INFERENCE_RUNNER_HEALTH_TIMEOUT_MS: z.coerce.number().int().min(100).default(5_000),
  INFERENCE_RUNNER_STALL_TIMEOUT_MS: z.coerce.number().int().min(100).default(30_000),
  INFERENCE_RUNNER_PROMPT_TIMEOUT_MS: z.coerce.number().int().min(100).default(300_000),
  // What one request may take of a shared runner: its time there, the tokens it may generate (a
  // request asking for none or more gets this many), how long its client may leave a stream unread.
  INFERENCE_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(100).default(600_000),
  INFERENCE_MAX_TOKENS: z.coerce.number().int().min(1).default(32_768),
  INFERENCE_CLIENT_STALL_TIMEOUT_MS: z.coerce.number().int().min(100).default(60_000),
  // Runner sockets and pid files (a socket path may hold at most 107 bytes: keep it short).
  INFERENCE_RUNTIME_DIR: z.string().min(1).default(() => inHome("INFERENCE_RUNTIME_DIR")),
  INFERENCE_LOG_DIR: z.string().min(1).default(() => inHome("INFERENCE_LOG_DIR")),
  // Runner logs kept there (every load writes one): the oldest go as runners start; a live runner's stays.
  INFERENCE_LOGS_KEPT: z.coerce.number().int().min(1).default(20),
  // One reading of the runners' figures serves every /metrics scrape for this long (0: none kept).
  INFERENCE_METRICS_CACHE_MS: z.coerce.number().int().min(0).max(60_000).default(1_000),
  INFERENCE_SETTINGS_PATH: z.string().min(1).default(() => inHome("INFERENCE_SETTINGS_PATH")),
  // The llama.cpp builds pulled from registries (default: `engines` in MODELS_PATH), and the one
  // runners use unless `engine use` or a model's settings chose another: a build's tag, reference or
  // digest, a llama.cpp version (`b6100`: its server image, pulled at start), or `builtin`.
  ENGINES_PATH: z.string().min(1).optional(),
  ENGINE_MOVE_RETRY: z.string().regex(KEEP_ALIVE_PATTERN, 'a duration like "1m" or "0"').refine((v) => !v.startsWith("-"), 'a duration like "1m" or "0", never -1').default("1m").transform(keepAliveMs),
  ENGINE_DEFAULT: z.string().trim().regex(/^[\x21-\x7e]{1,300}$/, "an engine's tag, reference, digest or llama.cpp version").optional(),
  // A replica of an inference pool: these models (comma-separated) are pulled if missing, loaded at
  // start, never unloaded, and readiness waits for them; other models get 404 unless allowed.
  PINNED_MODELS: z.string().default("").transform(list),
  ALLOW_UNPINNED_MODELS: z.enum(["true", "false"]).default("false").transform((v) => v === "true"),
  // /livez and /readyz answer without an API key (probes carry none).
  HEALTH_PATHS_OPEN: z.enum(["true", "false"]).default("true").transform((v) => v === "true"),
  // Memory: the runners' estimates must fit in a budget, the GPUs' memory when llama-server uses
  // them, else system memory (cgroup-capped); a set budget replaces the detected one (and its reserve).
  INFERENCE_MEMORY_BUDGET: z.string().regex(BYTES_PATTERN, "a size like 8GiB or 512MiB").transform(parseBytes).optional(),
  INFERENCE_MEMORY_RESERVE: z.string().regex(BYTES_PATTERN, "a size like 1GiB or 512MiB").default("1GiB").transform(parseBytes),
  // The smallest context a model without a configured one is given (else it is refused).
  INFERENCE_MIN_CONTEXT: z.coerce.number().int().min(256).default(4096),
  // llama-server's host prompt cache per runner (--cache-ram, whole MiB; its own default is 8 GiB)
  // and context checkpoints per slot (--ctx-checkpoints; its default 32): both counted in each
  // runner's estimate, beside a GPU budget in host memory. 0: off.
  INFERENCE_CACHE_RAM: z.string().regex(BYTES_PATTERN, "a size like 1GiB, 256MiB or 0 (off)").default("1GiB").transform((t) => Math.ceil(parseBytes(t) / MIB) * MIB),
  INFERENCE_CTX_CHECKPOINTS: z.coerce.number().int().min(0).max(32).default(4),
  // `off`: never budget or offload to a GPU, even where one is found.
  INFERENCE_GPU: z.enum(["auto", "off"]).default("auto"),
  // Prompt caches saved when a runner stops and restored when it loads again (0: off).
  INFERENCE_SLOT_CACHE_PATH: z.string().min(1).optional(),
  INFERENCE_SLOT_CACHE_BUDGET: z.string().regex(BYTES_PATTERN, "a size like 4GiB or 0 (off)").default("4GiB").transform(parseBytes),
  INFERENCE_SLOT_CACHE_SAVE_TIMEOUT_MS: z.coerce.number().int().nonnegative().default(5_000),
  // A session's conversation displaced from its slot by another session saved into that folder,
  // and restored when it comes back (src/slot-cache/parking.ts); false: it is processed again.
  INFERENCE_SLOT_PARKING: z.enum(["true", "false"]).default("true").transform((v) => v === "true"),
  // Where keys share a runner, a cache one key made is reused for another's prompt with the same
  // start, which shows in timings: true keeps reuse to a runner only one key has used (per-key.ts).
  INFERENCE_PROMPT_CACHE_PER_KEY: z.enum(["true", "false"]).default("false").transform((v) => v === "true"),
  // Agent sessions' requests sent to their slots, and sessions opened together over one start
  // given copies of the slot that processed it (src/scheduler/affinity.ts); false: llama-server picks.
  INFERENCE_SESSION_AFFINITY: z.enum(["true", "false"]).default("true").transform((v) => v === "true"),
});


/**
 * Docker Model Runner's names for our settings, so that scripts and compose files written for it
 * work here. `MODEL_RUNNER_HOST` is the URL its CLI talks to; only a bare host (no scheme) names
 * a listen address, so a URL there is left to the clients.
 */
export const DMR_NAMES: Record<string, keyof typeof Settings.shape> = {
  MODEL_RUNNER_PORT: "RUNNER_PORT",
  MODEL_RUNNER_SOCK: "RUNNER_SOCKET",
  MODEL_RUNNER_HOST: "RUNNER_HOST",
  LLAMA_SERVER_VERSION: "ENGINE_DEFAULT",
};

/** Every setting's name: ours, and Docker Model Runner's for some of them. */
export const settingNames = [...Object.keys(Settings.shape), ...Object.keys(DMR_NAMES)];

/** Every env name the configuration reads: the settings, and HOME (see IN_HOME). Deno's `--allow-env=` list needs them all. */
export const envNames = [...settingNames, "HOME"];

export type SettingValues = z.infer<typeof Settings>;

/** A setting's name, as in the environment and docs/configuration.md. */
export type SettingName = keyof typeof Settings.shape;

export function list(value: string | undefined): string[] {
  return (value ?? "").split(",").map((s) => s.trim()).filter(Boolean);
}

import { dirname, join } from "node:path";
import * as z from "zod";
import { DEFAULT_ORIGINS, isLoopback } from "./http/guard.ts";
import { checkKeyEntries, KeyFileError, readKeyFile, unnamed, type KeyEntry } from "./keys/keyring.ts";
import { HEALTH_PATHS } from "./pod/health.ts";
import { DMR_NAMES, envNames, IN_HOME, inHome, list, settingNames, Settings, type SettingValues } from "./settings.ts";

export { DMR_NAMES, envNames, settingNames };

// Configuration is read once at start from the environment and the command line, validated, and
// handed to the wiring as one typed object. A property given on the command line as
// `--photos.api.base-url=URL` is the same setting as the env `PHOTOS_API_BASE_URL`; the command
// line wins.

export class ConfigError extends Error {}

export type Config = ReturnType<typeof toConfig>;

function toConfig(s: SettingValues) {
  return {
    services: s.SERVICES,
    shutdownGraceMs: s.SHUTDOWN_GRACE_MS,
    security: security(s),
    http: { headersTimeoutMs: s.HTTP_HEADERS_TIMEOUT_MS, bodyIdleTimeoutMs: s.HTTP_BODY_IDLE_TIMEOUT_MS, maxConnections: s.HTTP_MAX_CONNECTIONS },
    album: {
      host: s.ALBUM_HOST,
      port: s.ALBUM_PORT,
      socketPath: s.ALBUM_SOCKET,
      photosBaseUrl: s.PHOTOS_API_BASE_URL,
      photosTimeoutMs: s.PHOTOS_API_TIMEOUT_MS,
      photosMaxBytes: s.PHOTOS_API_MAX_BYTES,
    },
    runner: {
      host: s.RUNNER_HOST,
      port: s.RUNNER_PORT,
      socketPath: s.RUNNER_SOCKET === "none" ? undefined : s.RUNNER_SOCKET,
    },
    models: {
      path: s.MODELS_PATH,
      lockStaleMs: s.STORE_LOCK_STALE_MS,
      defaultRegistry: s.DEFAULT_REGISTRY.toLowerCase(),
      insecureRegistries: s.REGISTRY_INSECURE,
      registryCredentials: s.REGISTRY_CREDENTIALS,
      hfEndpoint: s.HF_ENDPOINT,
      hfToken: s.HF_TOKEN,
      pullMaxConcurrent: s.PULL_MAX_CONCURRENT,
      pullStallTimeoutMs: s.PULL_STALL_TIMEOUT_MS,
      pullParts: { streams: s.PULL_PARTS, minBytes: s.PULL_PART_MIN_BYTES },
    },
    pod: { pinnedModels: s.PINNED_MODELS, allowUnpinned: s.ALLOW_UNPINNED_MODELS },
    files: { maxBytes: s.FILE_MAX_BYTES, idleTimeoutMs: s.FILE_UPLOAD_IDLE_TIMEOUT_MS, keyMaxFiles: s.KEY_MAX_FILES, keyMaxBytes: s.KEY_MAX_FILE_BYTES },
    inference: {
      maxRunners: s.INFERENCE_MAX_RUNNERS,
      slots: s.INFERENCE_SLOTS,
      promptCache: { bytes: s.INFERENCE_CACHE_RAM, checkpoints: s.INFERENCE_CTX_CHECKPOINTS },
      queueDepth: s.INFERENCE_QUEUE_DEPTH,
      runnerQueue: s.INFERENCE_RUNNER_QUEUE,
      threads: s.INFERENCE_THREADS,
      keepAlive: s.INFERENCE_KEEP_ALIVE,
      batchEvictAfterMs: s.INFERENCE_BATCH_EVICT_AFTER,
      engineMoveRetryMs: s.ENGINE_MOVE_RETRY,
      bodyLimit: s.INFERENCE_BODY_LIMIT,
      allowRemoteMedia: s.ALLOW_REMOTE_MEDIA,
      responsesStore: { maxEntries: s.RESPONSES_STORE_SIZE, maxBytes: s.RESPONSES_STORE_MAX_BYTES, maxAgeMs: s.RESPONSES_STORE_TTL_MS },
      readyTimeoutMs: s.INFERENCE_READY_TIMEOUT_MS,
      watch: { healthTimeoutMs: s.INFERENCE_RUNNER_HEALTH_TIMEOUT_MS, stallMs: s.INFERENCE_RUNNER_STALL_TIMEOUT_MS, promptStallMs: s.INFERENCE_RUNNER_PROMPT_TIMEOUT_MS },
      bounds: { timeoutMs: s.INFERENCE_REQUEST_TIMEOUT_MS, maxTokens: s.INFERENCE_MAX_TOKENS, clientStallMs: s.INFERENCE_CLIENT_STALL_TIMEOUT_MS },
      runtimeDir: s.INFERENCE_RUNTIME_DIR,
      logDir: s.INFERENCE_LOG_DIR, logsKept: s.INFERENCE_LOGS_KEPT,
      metricsCacheMs: s.INFERENCE_METRICS_CACHE_MS,
      settingsPath: s.INFERENCE_SETTINGS_PATH,
      engines: { path: s.ENGINES_PATH ?? join(s.MODELS_PATH, "engines"), default: s.ENGINE_DEFAULT },
      usagePath: s.USAGE_PATH ?? join(dirname(s.INFERENCE_SETTINGS_PATH), "usage.json"),
      usageBounds: { maxRows: s.USAGE_MAX_ROWS, keepDays: s.USAGE_KEEP_DAYS },
      batches: { path: s.BATCHES_PATH ?? join(dirname(s.INFERENCE_SETTINGS_PATH), "batches"), perKey: s.BATCHES_PER_KEY, running: s.BATCHES_RUNNING, keepMs: s.BATCHES_KEEP, keptPerKey: s.BATCHES_KEPT_PER_KEY },
      memory: { budget: s.INFERENCE_MEMORY_BUDGET, reserve: s.INFERENCE_MEMORY_RESERVE, minContext: s.INFERENCE_MIN_CONTEXT, gpu: s.INFERENCE_GPU },
      slotCache: { path: s.INFERENCE_SLOT_CACHE_PATH ?? join(s.MODELS_PATH, "slot-cache"), budgetBytes: s.INFERENCE_SLOT_CACHE_BUDGET, saveTimeoutMs: s.INFERENCE_SLOT_CACHE_SAVE_TIMEOUT_MS, parking: s.INFERENCE_SLOT_PARKING },
      promptsPerKey: s.INFERENCE_PROMPT_CACHE_PER_KEY,
      sessionAffinity: s.INFERENCE_SESSION_AFFINITY,
    },
  };
}

function security(s: SettingValues) {
  const keyEntries = checkedKeys([...list(s.API_KEYS).map((key): KeyEntry => ({ key, name: unnamed(key), admin: false, limits: {} })), ...(s.API_KEYS_FILE ? keysFile(s.API_KEYS_FILE) : [])]);
  const apiKeys = keyEntries.map((e) => e.key);
  return {
    keyEntries,
    keyDefaults: { inFlight: s.KEY_MAX_IN_FLIGHT, requestsPerMinute: s.KEY_REQUESTS_PER_MINUTE, tokensPerMinute: s.KEY_TOKENS_PER_MINUTE },
    allowedHosts: s.ALLOWED_HOSTS,
    allowedOrigins: [...DEFAULT_ORIGINS, ...list(s.ALLOWED_ORIGINS), ...list(s.DMR_ORIGINS), ...list(s.OLLAMA_ORIGINS)],
    apiKeys,
    openPaths: [...s.OPEN_PATHS, ...(s.HEALTH_PATHS_OPEN ? HEALTH_PATHS : [])],
    allowUnauthenticatedRemote: s.ALLOW_UNAUTHENTICATED_REMOTE,
  };
}

/** The key file: a key a line, with its name and limits (src/keys/keyring.ts). */
function keysFile(path: string): KeyEntry[] {
  try {
    return readKeyFile(path);
  } catch (error) {
    throw new ConfigError(`${error instanceof KeyFileError ? "" : "cannot read "}API_KEYS_FILE ${path}: ${(error as Error).message}`);
  }
}

/** API_KEYS and API_KEYS_FILE's keys together: each key and each name once, no reserved name. */
function checkedKeys(entries: KeyEntry[]): KeyEntry[] {
  try {
    return checkKeyEntries(entries);
  } catch (error) {
    throw new ConfigError(`API_KEYS and API_KEYS_FILE: ${(error as Error).message}`);
  }
}

/** `photos.api.base-url` -> `PHOTOS_API_BASE_URL`, the relaxed binding Spring-style properties use. */
export const propertyToEnv = (property: string) => property.replace(/[.-]/g, "_").toUpperCase();

function argvSettings(argv: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const arg of argv) {
    const match = /^--([a-zA-Z][\w.-]*)=(.*)$/s.exec(arg);
    if (!match) throw new ConfigError(`unrecognised argument "${arg}" (expected --property=value)`);
    out[propertyToEnv(match[1]!)] = match[2]!;
  }
  return out;
}

/**
 * The configuration from an environment and a command line, checked: every setting of
 * docs/configuration.md by its env name, or on the command line as `--photos.api.base-url=URL`
 * (which wins). Names the environment has that are not settings are ignored; unknown properties on
 * the command line are refused. Reads the files it names (`API_KEYS_FILE`), nothing else.
 *
 * @param env e.g. `process.env`
 * @param argv e.g. `process.argv.slice(2)`
 * @throws ConfigError naming each invalid setting
 */
export function loadConfig(env: Record<string, string | undefined>, argv: string[] = []): Config {
  const fromArgv = argvSettings(argv);
  const unknown = Object.keys(fromArgv).filter((key) => !settingNames.includes(key));
  if (unknown.length) throw new ConfigError(`unknown setting(s): ${unknown.join(", ")}`);
  const given = (key: string) => {
    const value = fromArgv[key] ?? env[key];
    return value === undefined || value === "" ? undefined : value;
  };
  const merged: Record<string, string> = {};
  for (const key of Object.keys(Settings.shape)) {
    const value = given(key);
    if (value !== undefined) merged[key] = value;
  }
  for (const [dmrName, ours] of Object.entries(DMR_NAMES)) {
    const value = given(dmrName);
    if (value === undefined || (dmrName === "MODEL_RUNNER_HOST" && value.includes("://"))) continue;
    if (merged[ours] !== undefined && merged[ours] !== value) {
      throw new ConfigError(`${dmrName}=${value} and ${ours}=${merged[ours]} disagree: set one of them`);
    }
    merged[ours] = value;
  }
  if (env.HOME) for (const key of Object.keys(IN_HOME) as (keyof typeof IN_HOME)[]) merged[key] ??= inHome(key, env.HOME);
  const parsed = Settings.safeParse(merged);
  if (!parsed.success) throw new ConfigError(`invalid configuration:\n${z.prettifyError(parsed.error)}`);
  const config = toConfig(parsed.data);
  const { runner, security } = config;
  if (config.services.includes("runner") && !isLoopback(runner.host) && security.apiKeys.length === 0 && !security.allowUnauthenticatedRemote) {
    throw new ConfigError(
      `the model runner would listen on ${runner.host} with no API key: set API_KEYS or API_KEYS_FILE (or ALLOW_UNAUTHENTICATED_REMOTE=true to serve anyone who can reach it)`,
    );
  }
  return config;
}

import { join } from "node:path";

// What each coding agent needs to run on this model runner, as pure functions: the command, the
// environment and the files of a private configuration folder (never the user's own), for one
// model given for every tier the agent uses. The API key travels in the environment only, never in
// a file, so that the folder can be shown and kept.

export const AGENT_NAMES = ["claude", "codex", "opencode", "copilot", "droid", "qwen", "pi"] as const;
export type AgentName = (typeof AGENT_NAMES)[number];

export type Setup = {
  /** The model runner as the agent reaches it: http://host:port, no path. */
  baseUrl: string;
  /** The key the agent sends (the server's API key, or the relay's token); "" when none is asked. */
  apiKey: string;
  model: string;
  /** Tokens one request may hold: the model runner's context for one slot (unknown: not told). */
  context?: number;
  /** The agent's private configuration folder (ours, not the agent's default). */
  home: string;
};

export type AgentPlan = {
  command: string;
  args: string[];
  /** Set for the agent, on top of the caller's environment. */
  env: Record<string, string>;
  /** Names in `env` whose values are secrets (shown as `***`). */
  secrets: string[];
  /** Written before the agent starts, whole. */
  files: { path: string; content: string }[];
};

export type Agent = {
  /** The API dialect it speaks, for people. */
  dialect: string;
  /** How to install it, for the error when it is not on PATH. */
  install: string;
  /**
   * The tokens of its first request (system prompt and tools), estimated: a context smaller than
   * this fails on the first request, whatever the user types.
   */
  openingTokens: number;
  plan(setup: Setup, args: string[]): AgentPlan;
};

/** The variable the agents that take a key by name read it from. */
const KEY_VAR = "LLAMADOCK_API_KEY";

/** A key for agents that insist on one when the server asks for none. */
const keyOrPlaceholder = (key: string) => key || "llamadock";

/** Claude Code (Anthropic Messages): everything in its environment, its state in CLAUDE_CONFIG_DIR. */
const claude: Agent = {
  dialect: "Anthropic Messages (/v1/messages)",
  install: "npm install -g @anthropic-ai/claude-code",
  // Its first request measured ~23k tokens with a typical BPE vocabulary (12 tools, ~7k
  // characters of system prompt: 48.0k characters of JSON with the first message).
  openingTokens: 23_000,
  plan(setup, args) {
    const tiers = ["ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"];
    const env: Record<string, string> = {
      ANTHROPIC_BASE_URL: setup.baseUrl,
      // A bearer token, as for a gateway; the user's own Anthropic key (if any) is blanked so that
      // it is neither sent here nor preferred by the agent.
      ANTHROPIC_AUTH_TOKEN: keyOrPlaceholder(setup.apiKey),
      ANTHROPIC_API_KEY: "",
      ...Object.fromEntries(tiers.map((name) => [name, setup.model])),
      CLAUDE_CONFIG_DIR: setup.home,
      // The model's real window, for a model it does not know: it compacts before the runner's
      // context is full, not at Anthropic's 200k. (CLAUDE_CODE_AUTO_COMPACT_WINDOW takes nothing
      // under 100k: Claude Code 2.1.332 raises it to that and warns.)
      ...(setup.context ? { CLAUDE_CODE_MAX_CONTEXT_TOKENS: String(setup.context) } : {}),
      // The token countdown is a system message after every tool result, and the attribution
      // header changes per request: either breaks the prompt prefix llama-server caches.
      CLAUDE_CODE_TOTAL_TOKENS_REMINDER: "off",
      CLAUDE_CODE_ATTRIBUTION_HEADER: "0",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      DISABLE_TELEMETRY: "1",
      DISABLE_AUTOUPDATER: "1",
    };
    return { command: "claude", args, env, secrets: ["ANTHROPIC_AUTH_TOKEN"], files: [] };
  },
};

/** A TOML basic string. */
const toml = (text: string) => JSON.stringify(text);

/** Codex CLI (OpenAI Responses): a provider block in the config.toml of a CODEX_HOME of ours. */
const codex: Agent = {
  dialect: "OpenAI Responses (/v1/responses)",
  install: "npm install -g @openai/codex",
  // Measured (Codex 0.171.0, `exec`): 38.9k characters of instructions, 9 tools and input, against
  // Claude Code's 48.0k for its ~23k tokens.
  openingTokens: 19_000,
  plan(setup, args) {
    const config = [
      `model = ${toml(setup.model)}`,
      `model_provider = "llamadock"`,
      // Its own table knows only OpenAI's models: without this it would compact at their window.
      ...(setup.context ? [`model_context_window = ${setup.context}`] : []),
      "",
      "[model_providers.llamadock]",
      `name = "llamadock"`,
      `base_url = ${toml(`${setup.baseUrl}/v1`)}`,
      `env_key = "${KEY_VAR}"`,
      `wire_api = "responses"`,
      "",
    ].join("\n");
    const env = { CODEX_HOME: setup.home, [KEY_VAR]: keyOrPlaceholder(setup.apiKey) };
    return { command: "codex", args, env, secrets: [KEY_VAR], files: [{ path: join(setup.home, "config.toml"), content: config }] };
  },
};

/** opencode (OpenAI chat through the AI SDK's openai-compatible provider): a file in OPENCODE_CONFIG. */
const opencode: Agent = {
  dialect: "OpenAI chat completions (/v1/chat/completions)",
  install: "npm install -g opencode-ai",
  // Measured (opencode 1.18.33, `run`): 30.6k characters of system prompt, 10 tools and input,
  // against Claude Code's 48.0k for its ~23k tokens.
  openingTokens: 15_000,
  plan(setup, args) {
    const path = join(setup.home, "opencode.json");
    const id = `llamadock/${setup.model}`;
    const config = {
      $schema: "https://opencode.ai/config.json",
      // Both of its tiers: the main model and the one for titles and summaries.
      model: id,
      small_model: id,
      provider: {
        llamadock: {
          npm: "@ai-sdk/openai-compatible",
          name: "llamadock",
          // Read from the environment when it starts: the key is never in the file.
          options: { baseURL: `${setup.baseUrl}/v1`, apiKey: `{env:${KEY_VAR}}` },
          models: { [setup.model]: { name: setup.model, ...(setup.context ? { limit: { context: setup.context, output: Math.min(8192, Math.floor(setup.context / 4)) } } : {}) } },
        },
      },
    };
    const env = { OPENCODE_CONFIG: path, [KEY_VAR]: keyOrPlaceholder(setup.apiKey) };
    return { command: "opencode", args, env, secrets: [KEY_VAR], files: [{ path, content: `${JSON.stringify(config, null, 2)}\n` }] };
  },
};

/** What an agent may answer in one request, told with the context: a quarter of it, at most 8192. */
const outputTokens = (context: number) => Math.min(8192, Math.floor(context / 4));

/**
 * Copilot CLI (OpenAI Responses): its offline BYOK mode, all in its environment, its state in a
 * COPILOT_HOME of ours. Offline it needs no GitHub login and sends no telemetry.
 */
const copilot: Agent = {
  dialect: "OpenAI Responses (/v1/responses)",
  install: "npm install -g @github/copilot",
  // Measured (Copilot CLI 1.0.102): interactive, 57.5k characters of instructions, 18 tools and
  // input; `-p`, 48.0k with 17 tools. Against Claude Code's 48.0k for its ~23k tokens.
  openingTokens: 27_000,
  plan(setup, args) {
    const env: Record<string, string> = {
      COPILOT_HOME: setup.home,
      COPILOT_OFFLINE: "true",
      COPILOT_PROVIDER_BASE_URL: `${setup.baseUrl}/v1`,
      COPILOT_PROVIDER_TYPE: "openai",
      // Its Responses requests name the session (prompt_cache_key); its chat ones name none.
      COPILOT_PROVIDER_WIRE_API: "responses",
      COPILOT_PROVIDER_API_KEY: keyOrPlaceholder(setup.apiKey),
      COPILOT_MODEL: setup.model,
      // Its catalog knows only GitHub's models: without these it assumes their windows.
      ...(setup.context ? { COPILOT_PROVIDER_MAX_PROMPT_TOKENS: String(setup.context - outputTokens(setup.context)), COPILOT_PROVIDER_MAX_OUTPUT_TOKENS: String(outputTokens(setup.context)) } : {}),
      COPILOT_AUTO_UPDATE: "false",
    };
    return { command: "copilot", args, env, secrets: ["COPILOT_PROVIDER_API_KEY"], files: [] };
  },
};

/**
 * Droid (Factory's CLI, OpenAI Responses): a custom model in the settings.json of a home of ours
 * (FACTORY_HOME_OVERRIDE), in its airgap mode, which needs no Factory login and calls nothing but
 * the model's server.
 */
const droid: Agent = {
  dialect: "OpenAI Responses (/v1/responses)",
  install: "npm install -g @factory/cli",
  // Measured (droid 0.225.2): interactive (its JSON-RPC mode), 54.9k characters of instructions,
  // 15 tools and input; `exec`, 35.0k with 6 tools. Against Claude Code's 48.0k for its ~23k tokens.
  openingTokens: 27_000,
  plan(setup, args) {
    const path = join(setup.home, ".factory", "settings.json");
    const settings = {
      customModels: [
        {
          model: setup.model,
          displayName: setup.model,
          baseUrl: `${setup.baseUrl}/v1`,
          // Expanded from the environment when it starts: the key is never in the file.
          apiKey: `\${${KEY_VAR}}`,
          // Its "openai" provider speaks Responses, naming the session (prompt_cache_key); its
          // chat one names none.
          provider: "openai",
          ...(setup.context ? { maxContextLimit: setup.context, maxOutputTokens: outputTokens(setup.context) } : {}),
        },
      ],
      sessionDefaultSettings: { model: `custom:${setup.model}-0` },
      cloudSessionSync: false,
    };
    const env = { FACTORY_HOME_OVERRIDE: setup.home, FACTORY_AIRGAP_ENABLED: "true", FACTORY_DROID_AUTO_UPDATE_ENABLED: "false", [KEY_VAR]: keyOrPlaceholder(setup.apiKey) };
    return { command: "droid", args, env, secrets: [KEY_VAR], files: [{ path, content: `${JSON.stringify(settings, null, 2)}\n` }] };
  },
};

/**
 * Qwen Code (OpenAI chat): a provider in the settings.json of a QWEN_HOME of ours. Its session goes
 * in a header of ours (its own name for it, sent to the gateways it knows), and what would send
 * other prompts in the session's name, or rewrite its history, is off.
 */
const qwen: Agent = {
  dialect: "OpenAI chat completions (/v1/chat/completions)",
  install: "npm install -g @qwen-code/qwen-code",
  // Measured (Qwen Code 0.24.4, headless): 55.3k characters of system prompt, 10 tools and input,
  // against Claude Code's 48.0k for its ~23k tokens.
  openingTokens: 27_000,
  plan(setup, args) {
    const path = join(setup.home, "settings.json");
    const settings = {
      modelProviders: {
        openai: [
          {
            id: setup.model,
            name: setup.model,
            baseUrl: `${setup.baseUrl}/v1`,
            // Read from the environment: the key is never in the file.
            envKey: KEY_VAR,
            generationConfig: { ...(setup.context ? { contextWindowSize: setup.context } : {}), customHeaders: { session_id: "${session_id}" } },
          },
        ],
      },
      security: { auth: { selectedType: "openai" } },
      model: { name: setup.model },
      // The session's id in that header, filled in per request.
      outboundCorrelation: { allowDynamicHeaderValues: true },
      // Memories are extracted and consolidated by requests of their own after each turn, in the
      // session's name: each would take its slot and leave the conversation to be processed again.
      memory: { enableManagedAutoMemory: false, enableManagedAutoDream: false },
      // Old tool results cleared after an hour idle: the history rewritten, processed again.
      context: { clearContextOnIdle: { toolResultsThresholdMinutes: -1 } },
      privacy: { usageStatisticsEnabled: false },
      general: { enableAutoUpdate: false },
    };
    const env = { QWEN_HOME: setup.home, [KEY_VAR]: keyOrPlaceholder(setup.apiKey) };
    return { command: "qwen", args, env, secrets: [KEY_VAR], files: [{ path, content: `${JSON.stringify(settings, null, 2)}\n` }] };
  },
};

/** pi (OpenAI chat): a provider in the models.json of a PI_CODING_AGENT_DIR of ours, chosen in its settings.json. */
const pi: Agent = {
  dialect: "OpenAI chat completions (/v1/chat/completions)",
  install: "npm install -g @mariozechner/pi-coding-agent",
  // Measured (pi 0.73.1, `-p`): 5.5k characters of system prompt, 4 tools and input, against
  // Claude Code's 48.0k for its ~23k tokens.
  openingTokens: 2_700,
  plan(setup, args) {
    const output = setup.context ? outputTokens(setup.context) : undefined;
    const models = {
      providers: {
        llamadock: {
          baseUrl: `${setup.baseUrl}/v1`,
          api: "openai-completions",
          // The name of a variable: read from the environment, never in the file.
          apiKey: KEY_VAR,
          // Its session in headers (session_id, x-session-affinity): off for servers it does not know.
          compat: { sendSessionAffinityHeaders: true },
          models: [{ id: setup.model, name: setup.model, ...(setup.context ? { contextWindow: setup.context, maxTokens: output } : {}) }],
        },
      },
    };
    // It compacts when what is left of the window is under reserveTokens (16384 by default).
    const settings = { defaultProvider: "llamadock", defaultModel: setup.model, ...(output ? { compaction: { reserveTokens: output } } : {}) };
    const env = { PI_CODING_AGENT_DIR: setup.home, PI_OFFLINE: "1", [KEY_VAR]: keyOrPlaceholder(setup.apiKey) };
    const files = [
      { path: join(setup.home, "models.json"), content: `${JSON.stringify(models, null, 2)}\n` },
      { path: join(setup.home, "settings.json"), content: `${JSON.stringify(settings, null, 2)}\n` },
    ];
    return { command: "pi", args, env, secrets: [KEY_VAR], files };
  },
};

export const AGENTS: Record<AgentName, Agent> = { claude, codex, opencode, copilot, droid, qwen, pi };

export const isAgentName = (name: string): name is AgentName => (AGENT_NAMES as readonly string[]).includes(name);

/** What `--print` shows: the environment set (secrets as `***`), the command, then each file. */
export function describePlan(plan: AgentPlan): string {
  const quote = (text: string) => (/^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`);
  const env = Object.entries(plan.env).map(([name, value]) => `${name}=${plan.secrets.includes(name) ? "***" : quote(value)}`);
  const command = [plan.command, ...plan.args].map(quote).join(" ");
  const files = plan.files.map((f) => `\n# ${f.path}\n${f.content.trimEnd()}`);
  return [...env, command, ...files].join("\n");
}

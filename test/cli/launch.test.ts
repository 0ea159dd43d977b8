import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { until } from "../support/until.ts";
import { llamadock, startLlamadock } from "./command.ts";

// `llamadock launch AGENT [MODEL] [-- args]` as users run it, against a real model runner that asks
// for an API key over TCP. The agents themselves are stood in for by small shell scripts named
// like them, first on PATH: each writes down what it was given (argv, environment, its config
// files), makes one real request to the address and with the key it was given (and one without the
// key), and exits with the status the test chooses.

const KEY = "sk-launch-test-key";
const TIERS = ["ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"];

let stack: Stack;
let dir: string;
let bin: string;
let home: string;
let dumps: string;

// Where each stand-in finds the address and key its launch gave it, as the real agent would.
const WHERE: Record<string, { base: string; key: string }> = {
  claude: { base: '"$ANTHROPIC_BASE_URL"', key: '"$ANTHROPIC_AUTH_TOKEN"' },
  codex: { base: `"$(sed -n 's/^base_url = "\\(.*\\)"$/\\1/p' "$CODEX_HOME/config.toml")"`, key: '"$LLAMADOCK_API_KEY"' },
  opencode: { base: `"$(sed -n 's/^ *"baseURL": "\\(.*\\)",$/\\1/p' "$OPENCODE_CONFIG")"`, key: '"$LLAMADOCK_API_KEY"' },
  copilot: { base: '"$COPILOT_PROVIDER_BASE_URL"', key: '"$COPILOT_PROVIDER_API_KEY"' },
  droid: { base: `"$(sed -n 's/^ *"baseUrl": "\\(.*\\)",$/\\1/p' "$FACTORY_HOME_OVERRIDE/.factory/settings.json")"`, key: '"$LLAMADOCK_API_KEY"' },
  qwen: { base: `"$(sed -n 's/^ *"baseUrl": "\\(.*\\)",$/\\1/p' "$QWEN_HOME/settings.json")"`, key: '"$LLAMADOCK_API_KEY"' },
  pi: { base: `"$(sed -n 's/^ *"baseUrl": "\\(.*\\)",$/\\1/p' "$PI_CODING_AGENT_DIR/models.json")"`, key: '"$LLAMADOCK_API_KEY"' },
};

function standIn(agent: string): string {
  const { base, key } = WHERE[agent]!;
  const out = `"$DUMPS/${agent}"`;
  return `#!/bin/sh
mkdir -p ${out}
printf '%s\\n' "$@" > ${out}/argv
env > ${out}/env
[ -n "$CODEX_HOME" ] && cp "$CODEX_HOME/config.toml" ${out}/config 2>/dev/null
[ -n "$OPENCODE_CONFIG" ] && cp "$OPENCODE_CONFIG" ${out}/config
[ -n "$FACTORY_HOME_OVERRIDE" ] && cp "$FACTORY_HOME_OVERRIDE/.factory/settings.json" ${out}/config
[ -n "$QWEN_HOME" ] && cp "$QWEN_HOME/settings.json" ${out}/config
[ -n "$PI_CODING_AGENT_DIR" ] && cp "$PI_CODING_AGENT_DIR/models.json" ${out}/config
base=${base}
# Claude Code's base URL has no /v1; the others' have it.
case "$base" in */v1) models="$base/models" ;; *) models="$base/v1/models" ;; esac
curl -s -o ${out}/models -w '%{http_code}' -H "authorization: Bearer "${key} "$models" > ${out}/status
curl -s -o /dev/null -w '%{http_code}' "$models" > ${out}/status-without-key
if [ -n "$STAND_IN_WAIT" ]; then
  trap 'echo "$STAND_IN_WAIT" > ${out}/signal; exit 143' TERM
  touch ${out}/waiting
  while :; do sleep 0.1; done
fi
exit \${STAND_IN_EXIT:-0}
`;
}

const env = (extra: Record<string, string> = {}) => ({ HOME: home, DUMPS: dumps, PATH: `${bin}${delimiter}${process.env.PATH}`, ...extra });
const overTcp = (extra: Record<string, string> = {}) => env({ MODEL_RUNNER_HOST: stack.url, MODEL_RUNNER_API_KEY: KEY, ...extra });
const overSocket = (extra: Record<string, string> = {}) => env({ MODEL_RUNNER_SOCK: stack.socket, ...extra });

/** `NAME=value` lines of an environment dump or `--print`, as a record. */
const vars = (text: string) => Object.fromEntries(text.split("\n").flatMap((l) => (/^[A-Z_]+=/.test(l) ? [[l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]] : [])));
const dumped = (agent: string, file: string) => readFile(join(dumps, agent, file), "utf8");

beforeAll(async () => {
  // ai/tiny is trained on 512 tokens, too few for any agent; ai/long on 131072.
  stack = await startStack({ models: ["ai/tiny"], shaped: { "ai/long": { context: 131072 } } });
  // The models pulled, the server asks for a key over TCP from now on.
  await stack.restart({ API_KEYS: KEY });
  dir = await mkdtemp(join(tmpdir(), "llamadock-launch-"));
  [bin, home, dumps] = [join(dir, "bin"), join(dir, "home"), join(dir, "dumps")];
  await Promise.all([mkdir(bin), mkdir(home), mkdir(dumps)]);
  for (const agent of Object.keys(WHERE)) {
    await writeFile(join(bin, agent), standIn(agent));
    await chmod(join(bin, agent), 0o755);
  }
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("--print", () => {
  it("claude: every tier is MODEL, the server's address, the key passed but shown as ***, the cache breakers off, the context told", async () => {
    const { code, stdout, stderr } = await llamadock(["launch", "claude", "ai/long", "--print"], overTcp());
    expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    expect(stdout).not.toContain(KEY);
    const shown = vars(stdout);
    for (const tier of TIERS) expect(shown[tier], tier).toBe("ai/long");
    expect(shown).toMatchObject({
      ANTHROPIC_BASE_URL: stack.url,
      ANTHROPIC_AUTH_TOKEN: "***",
      ANTHROPIC_API_KEY: "''",
      CLAUDE_CONFIG_DIR: join(home, ".llamadock", "agents", "claude"),
      CLAUDE_CODE_TOTAL_TOKENS_REMINDER: "off",
      CLAUDE_CODE_ATTRIBUTION_HEADER: "0",
      // 131072 per slot: the model's trained context for each of the 4 slots.
      CLAUDE_CODE_MAX_CONTEXT_TOKENS: "131072",
    });
    expect(stdout.trimEnd().split("\n").at(-1)).toBe("claude");
    // Nothing written: --print only shows (Bun keeps a cache of its own in HOME).
    expect(await readdir(home)).not.toContain(".llamadock");
  });

  it("codex: a provider block with wire_api responses at the server's /v1, the key by name, the context window", async () => {
    const { code, stdout } = await llamadock(["launch", "codex", "ai/long", "--print", "--", "exec", "do it"], overTcp());
    expect(code).toBe(0);
    expect(stdout).not.toContain(KEY);
    expect(vars(stdout)).toMatchObject({ CODEX_HOME: join(home, ".llamadock", "agents", "codex"), LLAMADOCK_API_KEY: "***" });
    expect(stdout).toContain("codex exec 'do it'\n");
    expect(stdout).toContain(`# ${join(home, ".llamadock", "agents", "codex", "config.toml")}\nmodel = "ai/long"\nmodel_provider = "llamadock"\nmodel_context_window = 131072\n`);
    expect(stdout).toContain(`[model_providers.llamadock]\nname = "llamadock"\nbase_url = "${stack.url}/v1"\nenv_key = "LLAMADOCK_API_KEY"\nwire_api = "responses"`);
  });

  it("opencode: a provider entry for the AI SDK's openai-compatible package, both tiers MODEL, the key read from the environment", async () => {
    const { code, stdout } = await llamadock(["launch", "opencode", "ai/long", "--print"], overTcp());
    expect(code).toBe(0);
    expect(stdout).not.toContain(KEY);
    const path = join(home, ".llamadock", "agents", "opencode", "opencode.json");
    expect(vars(stdout)).toMatchObject({ OPENCODE_CONFIG: path, LLAMADOCK_API_KEY: "***" });
    const config = JSON.parse(stdout.slice(stdout.indexOf(`# ${path}\n`) + path.length + 3));
    expect(config).toMatchObject({
      model: "llamadock/ai/long",
      small_model: "llamadock/ai/long",
      provider: {
        llamadock: {
          npm: "@ai-sdk/openai-compatible",
          options: { baseURL: `${stack.url}/v1`, apiKey: "{env:LLAMADOCK_API_KEY}" },
          models: { "ai/long": { limit: { context: 131072, output: 8192 } } },
        },
      },
    });
  });

  it("copilot: its offline BYOK mode, Responses at the server's /v1, the key passed but shown as ***, its prompt and answer sizes within the context", async () => {
    const { code, stdout } = await llamadock(["launch", "copilot", "ai/long", "--print", "--", "-p", "do it"], overTcp());
    expect(code).toBe(0);
    expect(stdout).not.toContain(KEY);
    expect(vars(stdout)).toEqual({
      COPILOT_HOME: join(home, ".llamadock", "agents", "copilot"),
      COPILOT_OFFLINE: "true",
      COPILOT_PROVIDER_BASE_URL: `${stack.url}/v1`,
      COPILOT_PROVIDER_TYPE: "openai",
      COPILOT_PROVIDER_WIRE_API: "responses",
      COPILOT_PROVIDER_API_KEY: "***",
      COPILOT_MODEL: "ai/long",
      COPILOT_PROVIDER_MAX_PROMPT_TOKENS: String(131072 - 8192),
      COPILOT_PROVIDER_MAX_OUTPUT_TOKENS: "8192",
      COPILOT_AUTO_UPDATE: "false",
    });
    expect(stdout.trimEnd().split("\n").at(-1)).toBe("copilot -p 'do it'");
  });

  /** The JSON file `--print` shows at `path`. */
  const shownFile = (stdout: string, path: string) => JSON.parse(stdout.slice(stdout.indexOf(`# ${path}\n`) + path.length + 3).split("\n# ")[0]!);

  it("droid: a custom model at the server's /v1 (Responses), the key read from the environment, in its airgap mode, the context told", async () => {
    const { code, stdout } = await llamadock(["launch", "droid", "ai/long", "--print"], overTcp());
    expect(code).toBe(0);
    expect(stdout).not.toContain(KEY);
    const folder = join(home, ".llamadock", "agents", "droid");
    expect(vars(stdout)).toEqual({ FACTORY_HOME_OVERRIDE: folder, FACTORY_AIRGAP_ENABLED: "true", FACTORY_DROID_AUTO_UPDATE_ENABLED: "false", LLAMADOCK_API_KEY: "***" });
    expect(shownFile(stdout, join(folder, ".factory", "settings.json"))).toEqual({
      customModels: [{ model: "ai/long", displayName: "ai/long", baseUrl: `${stack.url}/v1`, apiKey: "${LLAMADOCK_API_KEY}", provider: "openai", maxContextLimit: 131072, maxOutputTokens: 8192 }],
      sessionDefaultSettings: { model: "custom:ai/long-0" },
      cloudSessionSync: false,
    });
  });

  it("qwen: a provider at the server's /v1, the key read from the environment, its session in a header, what would break the cache off", async () => {
    const { code, stdout } = await llamadock(["launch", "qwen", "ai/long", "--print"], overTcp());
    expect(code).toBe(0);
    expect(stdout).not.toContain(KEY);
    const folder = join(home, ".llamadock", "agents", "qwen");
    expect(vars(stdout)).toEqual({ QWEN_HOME: folder, LLAMADOCK_API_KEY: "***" });
    expect(shownFile(stdout, join(folder, "settings.json"))).toMatchObject({
      modelProviders: { openai: [{ id: "ai/long", baseUrl: `${stack.url}/v1`, envKey: "LLAMADOCK_API_KEY", generationConfig: { contextWindowSize: 131072, customHeaders: { session_id: "${session_id}" } } }] },
      security: { auth: { selectedType: "openai" } },
      model: { name: "ai/long" },
      outboundCorrelation: { allowDynamicHeaderValues: true },
      memory: { enableManagedAutoMemory: false, enableManagedAutoDream: false },
      context: { clearContextOnIdle: { toolResultsThresholdMinutes: -1 } },
    });
  });

  it("pi: a provider at the server's /v1 chosen as its default, the key by the name of its variable, its session headers on, the context told", async () => {
    const { code, stdout } = await llamadock(["launch", "pi", "ai/long", "--print"], overTcp());
    expect(code).toBe(0);
    expect(stdout).not.toContain(KEY);
    const folder = join(home, ".llamadock", "agents", "pi");
    expect(vars(stdout)).toEqual({ PI_CODING_AGENT_DIR: folder, PI_OFFLINE: "1", LLAMADOCK_API_KEY: "***" });
    expect(shownFile(stdout, join(folder, "models.json"))).toEqual({
      providers: { llamadock: { baseUrl: `${stack.url}/v1`, api: "openai-completions", apiKey: "LLAMADOCK_API_KEY", compat: { sendSessionAffinityHeaders: true }, models: [{ id: "ai/long", name: "ai/long", contextWindow: 131072, maxTokens: 8192 }] } },
    });
    expect(shownFile(stdout, join(folder, "settings.json"))).toEqual({ defaultProvider: "llamadock", defaultModel: "ai/long", compaction: { reserveTokens: 8192 } });
  });

  it("over the Unix socket: says the socket is relayed on a loopback port at launch", async () => {
    const { code, stdout } = await llamadock(["launch", "claude", "ai/long", "--print"], overSocket());
    expect(code).toBe(0);
    expect(stdout.split("\n")[0]).toBe(`# unix:${stack.socket}, relayed on a loopback port for the agent's lifetime (its key: a token of that launch)`);
  });
});

describe("the model and its context", () => {
  it("without MODEL: none loaded and two stored is an error listing them", async () => {
    const { code, stderr } = await llamadock(["launch", "claude", "--print"], overSocket());
    expect(code).toBe(1);
    expect(stderr).toBe("llamadock: name the model to launch with, one of: ai/long:latest, ai/tiny:latest\n");
  });

  it("a context too small for the agent's opening prompt: one line with the configure command, which fixes it", async () => {
    for (const [agent, needed] of [["claude", 23000], ["codex", 19000], ["opencode", 15000], ["copilot", 27000], ["droid", 27000], ["qwen", 27000], ["pi", 2700]] as const) {
      const refused = await llamadock(["launch", agent, "ai/tiny"], overSocket());
      expect(refused.code, agent).toBe(1);
      expect(refused.stderr.split("\n")).toHaveLength(2);
      expect(refused.stderr).toMatch(new RegExp(`^llamadock: ai/tiny holds 512 tokens per request, but ${agent}'s opening prompt alone is about ${needed}: run \`llamadock configure ai/tiny --context-size \\d+\` \\(shared by its 4 slots\\) and launch again\n$`));
    }
    const fix = /`(llamadock configure .*?)`/.exec((await llamadock(["launch", "claude", "ai/tiny"], overSocket())).stderr)![1]!;
    expect(fix).toBe("llamadock configure ai/tiny --context-size 184320");
    expect((await llamadock(fix.split(" ").slice(1), overSocket())).code).toBe(0);
    const fixed = await llamadock(["launch", "claude", "ai/tiny", "--print"], overSocket());
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(vars(fixed.stdout).CLAUDE_CODE_MAX_CONTEXT_TOKENS).toBe("46080");
  });

  it("without MODEL: the model loaded (configure preloads it)", async () => {
    await until(async () => (await llamadock(["ps"], overSocket())).stdout.includes("ai/tiny:latest"), "ai/tiny loaded");
    const { code, stdout } = await llamadock(["launch", "codex", "--print"], overSocket());
    expect(code).toBe(0);
    expect(stdout).toContain('model = "ai/tiny:latest"\n');
  });

  it("a model not in the store: how to pull it", async () => {
    expect(await llamadock(["launch", "claude", "ai/nope"], overSocket())).toMatchObject({ code: 1, stderr: "llamadock: model ai/nope not found: pull it first with `llamadock pull ai/nope`\n" });
  });
});

describe("running the agent", () => {
  it.each(["claude", "codex", "opencode", "copilot", "droid", "qwen", "pi"])("%s over TCP: its arguments, environment and private config; a real request with its key; its exit status", async (agent) => {
    const { code, stderr } = await llamadock(["launch", agent, "ai/long", "--", "-p", "two words"], overTcp({ STAND_IN_EXIT: "3" }));
    expect({ code, stderr }).toEqual({ code: 3, stderr: "" });
    expect(await dumped(agent, "argv")).toBe("-p\ntwo words\n");
    expect(await dumped(agent, "status")).toBe("200");
    expect(JSON.parse(await dumped(agent, "models")).data.map((m: { id: string }) => m.id)).toContain("ai/long:latest");
    expect(await dumped(agent, "status-without-key")).toBe("401");
    const seen = vars(await dumped(agent, "env"));
    if (agent === "claude") {
      for (const tier of TIERS) expect(seen[tier], tier).toBe("ai/long");
      expect(seen).toMatchObject({ ANTHROPIC_AUTH_TOKEN: KEY, ANTHROPIC_API_KEY: "", CLAUDE_CODE_TOTAL_TOKENS_REMINDER: "off", CLAUDE_CODE_MAX_CONTEXT_TOKENS: "131072" });
    } else if (agent === "copilot") {
      expect(seen).toMatchObject({ COPILOT_PROVIDER_API_KEY: KEY, COPILOT_PROVIDER_BASE_URL: `${stack.url}/v1`, COPILOT_MODEL: "ai/long" });
    } else {
      expect(seen.LLAMADOCK_API_KEY).toBe(KEY);
      const config = await dumped(agent, "config");
      expect(config).not.toContain(KEY);
      expect(config).toContain({ codex: `base_url = "${stack.url}/v1"`, opencode: `"baseURL": "${stack.url}/v1"` }[agent] ?? `"baseUrl": "${stack.url}/v1"`);
    }
  });

  it("over the Unix socket: a loopback relay that lets in the agent's token only, gone when the agent is", async () => {
    const { code } = await llamadock(["launch", "claude", "ai/long"], overSocket());
    expect(code).toBe(0);
    const seen = vars(await dumped("claude", "env"));
    expect(seen.ANTHROPIC_BASE_URL).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(seen.ANTHROPIC_AUTH_TOKEN).toMatch(/^llamadock-[0-9a-f]{48}$/);
    expect(await dumped("claude", "status")).toBe("200");
    expect(await dumped("claude", "status-without-key")).toBe("401");
    await expect(fetch(`${seen.ANTHROPIC_BASE_URL}/v1/models`)).rejects.toThrow();
  });

  it("signals reach the agent; the command ends with its status", async () => {
    const launched = startLlamadock(["launch", "opencode", "ai/long"], overSocket({ STAND_IN_WAIT: "TERM" }));
    await until(() => readFile(join(dumps, "opencode", "waiting")).then(() => true, () => false), "the agent to start");
    launched.child.kill("SIGTERM");
    expect(await launched.exited).toBe(143);
    expect(await dumped("opencode", "signal")).toBe("TERM\n");
  });

  it("an unknown agent, or one not on PATH: status 1 or 127 and what to do", async () => {
    expect(await llamadock(["launch", "vim", "ai/long"], overSocket())).toMatchObject({ code: 1, stderr: "llamadock: unknown agent vim: one of claude, codex, opencode, copilot, droid, qwen, pi\n" });
    const missing = await llamadock(["launch", "codex", "ai/long"], overSocket({ PATH: "/usr/bin:/bin" }));
    expect(missing).toMatchObject({ code: 127, stderr: "llamadock: codex is not on PATH: install it with `npm install -g @openai/codex`\n" });
  });

  it("arguments for the agent must come after --", async () => {
    const { code, stderr } = await llamadock(["launch", "claude", "ai/long", "-p"], overSocket());
    expect(code).toBe(1);
    expect(stderr).toContain("unknown option '-p'");
  });
});

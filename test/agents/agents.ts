import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { AGENTS, type AgentName } from "../../src/cli/launch/agents.ts";
import { startStack, type Stack } from "../inference/harness.ts";
import { BIN } from "../cli/command.ts";
import { ask } from "../support/http.ts";
import { projectRoot } from "../support/server-process.ts";
import { until } from "../support/until.ts";

// What the tests of the real coding agents share (Claude Code, Codex CLI, opencode, Copilot CLI,
// Droid, Qwen Code, pi: the npm packages pinned in package.json, run from node_modules/.bin). A model runner as users run it
// (src/index.ts, real llama-server runners) that asks for a named key over TCP, with two tiny BPE
// models: one whose single slot holds 65536 tokens, room for any agent's opening prompt (30-60k
// tokens of this vocabulary, about a character each), and one of 4096 tokens, too small for any.
// Both answer in a few tokens and never call a tool (chat-vocab.ts): the facts checked are the
// transport's (requests, usage, the prompt cache, exit status, error text), not the model's prose.
// Each agent runs in a home and a working folder of its own, as `llamadock launch` starts it.

export const MODEL = "ai/agent";
export const SMALL = "ai/small";
/** The model's name as the ledger and the runner say it. */
export const MODEL_TAG = `${MODEL}:latest`;
const KEY = "sk-agents-test-key";
export const KEY_NAME = "agent-tests";
const BEARER = { authorization: `Bearer ${KEY}` };

/** How long one agent run may take before it is killed and the test fails (a cold 60k-token prefill on a shared core). */
const RUN_LIMIT_MS = 420_000;

export type World = {
  stack: Stack;
  /** The agent's HOME: its sessions and launch's configuration folders live there. */
  home: string;
  /** The folder the agent works in. */
  work: string;
  stop(): Promise<void>;
};

/**
 * `context`: MODEL's, 65536 unless an agent needs more room than its opening prompt (Qwen Code
 * compacts a conversation past its window less 33000 tokens).
 */
export async function startWorld(context = 65536): Promise<World> {
  const terse = { vocabulary: "bpe", answers: "terse" } as const;
  // At most 64 tokens an answer: a terse answer ends well before, and a stray one stays short.
  const stack = await startStack({ models: [], shaped: { [MODEL]: { ...terse, seed: 5, context }, [SMALL]: { ...terse, seed: 6, context: 4096 } }, env: { INFERENCE_MAX_TOKENS: "64" } });
  const dir = await mkdtemp(join(tmpdir(), "llamadock-agents-"));
  try {
    // One slot with the whole context (four would each hold a quarter, less than Claude Code's opening prompt).
    const configured = await ask({ url: stack.url }, "POST", "/engines/_configure", { model: MODEL, "context-size": context, slots: 1 });
    if (configured.status !== 202) throw new Error(`configure: ${configured.status} ${configured.body}`);
    await writeFile(join(stack.dir, "keys"), `${KEY} name=${KEY_NAME}\n`);
    await stack.restart({ API_KEYS_FILE: join(stack.dir, "keys") });
    const [home, work] = [join(dir, "home"), join(dir, "work")];
    await Promise.all([mkdir(home), mkdir(work)]);
    return {
      stack,
      home,
      work,
      async stop() {
        await stack.stop();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await stack.stop();
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

export type Run = { code: number | null; stdout: string; stderr: string; killed: boolean };

/**
 * The environment the agent sees: the packages' binaries first on PATH, a HOME of the test's, and
 * none of the caller's own agent settings or XDG folders (which would point the agent elsewhere).
 * npm's registry is a closed port: the agents need nothing from one while they run (opencode
 * installs its plugin package into its config folder in the background, and goes on without it,
 * at once without npm's retries;
 * the AI SDK provider launch names, @ai-sdk/openai-compatible, is built into it).
 */
function agentEnv(world: World, extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of Object.keys(env)) {
    if (/^(XDG_|ANTHROPIC_|CLAUDE_|CODEX_|OPENAI_|OPENCODE_|COPILOT_|GH_|GITHUB_|FACTORY_|QWEN_|PI_|MODEL_RUNNER_)/.test(name)) delete env[name];
  }
  return { ...env, HOME: world.home, PATH: `${join(projectRoot, "node_modules", ".bin")}${delimiter}${process.env.PATH}`, NO_COLOR: "1", npm_config_registry: "http://127.0.0.1:9/", npm_config_fetch_retries: "0", ...extra };
}

/**
 * Runs a command in the working folder to its end (killed, its whole process group, past the
 * limit). Its stdin is /dev/null, or a pipe kept open for the whole run, as a parent process that
 * never writes to it leaves it.
 */
function run(command: string, args: string[], env: NodeJS.ProcessEnv, cwd: string, stdin: "null" | "open pipe"): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, detached: true, stdio: [stdin === "null" ? "ignore" : "pipe", "pipe", "pipe"] });
    let [stdout, stderr, killed] = ["", "", false];
    child.stdout!.on("data", (chunk: Buffer) => (stdout += chunk));
    child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk));
    const timer = setTimeout(() => {
      killed = true;
      process.kill(-child.pid!, "SIGKILL");
    }, RUN_LIMIT_MS);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      child.stdin?.destroy();
      resolve({ code, stdout, stderr, killed });
    });
  });
}

/** `llamadock launch AGENT MODEL -- ARGS` as a user runs it, over TCP with the named key. */
export function launch(world: World, agent: AgentName, model: string, args: string[], stdin: "null" | "open pipe" = "null"): Promise<Run> {
  const env = agentEnv(world, { MODEL_RUNNER_HOST: world.stack.url, MODEL_RUNNER_API_KEY: KEY });
  return run(BIN, ["launch", agent, model, "--", ...args], env, world.work, stdin);
}

/**
 * The agent alone, set up as launch sets it up for `model` (its plan, src/cli/launch/agents.ts)
 * where launch does not know the model's context: launch itself refuses a model too small for
 * the agent before starting it, and an agent told the context refuses too long a prompt itself
 * (Claude Code does); here the model runner's answer is what the agent meets.
 */
export async function runAgent(world: World, agent: AgentName, model: string, args: string[]): Promise<Run> {
  const home = join(world.home, "plans", agent);
  const plan = AGENTS[agent].plan({ baseUrl: world.stack.url, apiKey: KEY, model, home }, args);
  await mkdir(home, { recursive: true });
  for (const file of plan.files) await writeFile(file.path, file.content);
  return run(plan.command, plan.args, agentEnv(world, plan.env), world.work, "null");
}

/**
 * The agent alone, set up as launch sets it up for MODEL (its context told), spoken to over its
 * stdin as its scripted modes take it: `talk` sends lines and waits for the answers it needs, and
 * the agent's stdin is closed once it is done (killed past the limit, as `run`).
 */
export async function converse(world: World, agent: AgentName, context: number, args: string[], talk: (say: (line: string) => void, hear: (test: (line: string) => boolean) => Promise<string>) => Promise<void>): Promise<Run> {
  const home = join(world.home, "plans", agent);
  const plan = AGENTS[agent].plan({ baseUrl: world.stack.url, apiKey: KEY, model: MODEL, home, context }, args);
  for (const file of plan.files) {
    await mkdir(join(file.path, ".."), { recursive: true });
    await writeFile(file.path, file.content);
  }
  const child = spawn(plan.command, plan.args, { cwd: world.work, env: agentEnv(world, plan.env), detached: true, stdio: ["pipe", "pipe", "pipe"] });
  let [stdout, stderr, killed] = ["", "", false];
  const lines: string[] = [];
  let waiting: (() => void) | undefined;
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk;
    lines.splice(0, lines.length, ...stdout.split("\n").slice(0, -1));
    waiting?.();
  });
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk));
  const timer = setTimeout(() => {
    killed = true;
    process.kill(-child.pid!, "SIGKILL");
  }, RUN_LIMIT_MS);
  const closed = new Promise<number | null>((resolve) => child.once("close", resolve));
  let heard = 0;
  const hear = async (test: (line: string) => boolean) => {
    for (;;) {
      const at = lines.findIndex((line, i) => i >= heard && test(line));
      if (at >= 0) {
        heard = at + 1;
        return lines[at]!;
      }
      if (child.exitCode !== null || killed) throw new Error(`${agent} ended before answering; stderr: ${stderr}`);
      await Promise.race([new Promise<void>((resolve) => (waiting = resolve)), closed]);
    }
  };
  try {
    await talk((line) => child.stdin.write(`${line}\n`), hear);
  } finally {
    child.stdin.end();
  }
  const code = await closed;
  clearTimeout(timer);
  return { code, stdout, stderr, killed };
}

/** One generation as llama-server logged it: prompt tokens processed (not from its cache), tokens generated, the prompt's size. */
export type Task = { processed: number; generated: number; prompt: number };

/** MODEL's runner's tasks, in order (its log is the runner's own account). */
async function tasks(world: World): Promise<Task[]> {
  const folder = join(world.stack.dir, "logs");
  // No folder before the first runner starts.
  const names = await readdir(folder).catch(() => [] as string[]);
  const logs = await Promise.all(names.map((name) => readFile(join(folder, name), "utf8")));
  const log = logs.filter((text) => text.split("\n", 1)[0]!.includes(` --alias ${MODEL_TAG} `)).join("\n");
  const processed = new Map([...log.matchAll(/task (\d+) \| prompt eval time = +[\d.]+ ms \/ +(\d+) tokens/g)].map((m) => [m[1], Number(m[2])]));
  const generated = new Map([...log.matchAll(/task (\d+) \| +eval time = +[\d.]+ ms \/ +(\d+) tokens/g)].map((m) => [m[1], Number(m[2])]));
  // At release a slot holds the prompt and what was generated, less the last token (sampled, never decoded).
  const logged = [...log.matchAll(/id +(\d+) \| task (\d+) \| stop processing: n_tokens = (\d+)/g)].flatMap((m) => {
    const [slot, task, held] = [m[1]!, m[2]!, Number(m[3])];
    const made = generated.get(task);
    return processed.has(task) && made !== undefined ? [{ slot, processed: processed.get(task)!, generated: made, prompt: held - made + 1 }] : [];
  });
  return withPrefills(logged);
}

/**
 * Tasks with each leader's prefill folded into its request: a prefill (a conversation's start
 * processed alone, src/inference/prefill.ts) is a task of its own in the log, generating nothing,
 * followed on its slot by its request with the same prompt; the request's answer counts what the
 * prefill processed as its own (and the ledger, one request).
 */
function withPrefills(logged: (Task & { slot: string })[]): Task[] {
  const out: Task[] = [];
  for (let at = 0; at < logged.length; at++) {
    const task = logged[at]!;
    // The slot's next task (other slots' may be logged between them).
    const after = logged.findIndex((other, index) => index > at && other.slot === task.slot);
    const next = after === -1 ? undefined : logged[after]!;
    const prefill = next !== undefined && task.generated <= 1 && next.prompt === task.prompt;
    // The request processes its prompt's last token again (llama-server evaluates at least one): counted once.
    if (prefill) logged[after] = { ...next, processed: Math.min(next.prompt, next.processed + task.processed) };
    else out.push({ processed: task.processed, generated: task.generated, prompt: task.prompt });
  }
  return out;
}

type Ledger = { requests: number; prompt_tokens: number; completion_tokens: number; errors: number };

/** The key's ledger row for MODEL (all days: one here). */
async function ledger(world: World): Promise<Ledger> {
  const answer = await ask({ url: world.stack.url }, "GET", "/engines/usage", undefined, BEARER);
  const rows = (answer.json().data as (Ledger & { key: string; model: string })[]).filter((row) => row.key === KEY_NAME && row.model === MODEL_TAG);
  const sum = (field: keyof Ledger) => rows.reduce((total, row) => total + row[field], 0);
  return { requests: sum("requests"), prompt_tokens: sum("prompt_tokens"), completion_tokens: sum("completion_tokens"), errors: sum("errors") };
}

/** Inference requests answered, by `route status` (our /metrics). */
async function routes(world: World): Promise<Record<string, number>> {
  const text = (await ask({ url: world.stack.url }, "GET", "/metrics", undefined, BEARER)).body;
  return Object.fromEntries([...text.matchAll(/^llamadock_requests_total\{route="([^"]+)",status="(\d+)"\} (\d+)$/gm)].map((m) => [`${m[1]} ${m[2]}`, Number(m[3])]));
}

export type Mark = { tasks: number; ledger: Ledger; routes: Record<string, number> };

export async function mark(world: World): Promise<Mark> {
  return { tasks: (await tasks(world)).length, ledger: await ledger(world), routes: await routes(world) };
}

/** What was asked of the model runner since `before`, once its ledger and MODEL's runner log both have all of it. */
export type Served = { tasks: Task[]; ledger: Ledger; routes: Record<string, number> };

export async function servedSince(world: World, before: Mark): Promise<Served> {
  let served: Served | undefined;
  // The log is written a little after the answer, the ledger as the answer ends.
  await until(async () => {
    const now = await ledger(world);
    const logged = (await tasks(world)).slice(before.tasks);
    served = {
      tasks: logged,
      ledger: { requests: now.requests - before.ledger.requests, prompt_tokens: now.prompt_tokens - before.ledger.prompt_tokens, completion_tokens: now.completion_tokens - before.ledger.completion_tokens, errors: now.errors - before.ledger.errors },
      routes: {},
    };
    return logged.length === served.ledger.requests - served.ledger.errors;
  }, "the runner's log and the ledger to have the requests");
  const after = await routes(world);
  served!.routes = Object.fromEntries(Object.entries(after).flatMap(([route, count]) => (count > (before.routes[route] ?? 0) ? [[route, count - (before.routes[route] ?? 0)]] : [])));
  return served!;
}

/** The usage llama-server counted for some tasks, summed: prompt tokens, the part of them cached, tokens generated. */
export type Usage = { prompt: number; cached: number; output: number };

export function counted(list: Task[]): Usage {
  return list.reduce((sum, t) => ({ prompt: sum.prompt + t.prompt, cached: sum.cached + t.prompt - t.processed, output: sum.output + t.generated }), { prompt: 0, cached: 0, output: 0 });
}

/**
 * The slot-cache entry a session of the test's key is parked under: the slot table names sessions
 * per key (src/scheduler/session-slots.ts), and the folder names a parked one by a digest of that
 * name (src/slot-cache/parking.ts).
 */
export const parkedEntry = (session: string) => `p${createHash("sha256").update(`${KEY_NAME}\u0000${session}`).digest("hex").slice(0, 32)}`;

/** The parked sessions' entries in the slot-cache folder (named for a session, not a slot). */
export async function parked(world: World): Promise<string[]> {
  const names = await readdir(join(world.stack.dir, "models", "slot-cache")).catch(() => [] as string[]);
  return names.flatMap((name) => /-(p[0-9a-f]{32})\.bin$/.exec(name)?.slice(1) ?? []);
}

/**
 * MODEL's runner unloaded (over the socket, its owner's door): a slot that holds an agent session's
 * conversation, as the slot table knows it, is parked under that session's name. So an entry new
 * after it says that the table recognised the session the agent's requests named.
 */
export async function unloadParking(world: World): Promise<string[]> {
  const before = new Set(await parked(world));
  const answer = await ask({ socketPath: world.stack.socket }, "POST", "/engines/unload", { models: [MODEL] });
  if (answer.status !== 200) throw new Error(`unload: ${answer.status} ${answer.body}`);
  return (await parked(world)).filter((entry) => !before.has(entry));
}

import { spawn } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { homedir, constants } from "node:os";
import { dirname, join } from "node:path";
import type { Command } from "commander";
import { CliError, describeTarget, type Client, type ClientOptions } from "../client.ts";
import type { ClientFor } from "../models.ts";
import { AGENT_NAMES, AGENTS, describePlan, isAgentName, type AgentName, type AgentPlan, type Setup } from "./agents.ts";
import { chooseModel, contextPerRequest, tooSmall } from "./model.ts";
import { startRelay, type Relay } from "./relay.ts";

// `llamadock launch AGENT [MODEL] [-- agent args]`: runs a coding agent in the foreground on a
// model of this runner, set up through its environment and a configuration folder of ours
// (~/.llamadock/agents/AGENT), never the user's own. Its exit status is the command's.

/** The private configuration folder of an agent. */
export const agentHome = (agent: AgentName) => join(homedir(), ".llamadock", "agents", agent);

/** The words after `--` on the command line are the agent's; before it, AGENT and MODEL at most. */
function splitOperands(command: Command, operands: string[]): { model?: string; args: string[] } {
  // Commander keeps the argv it parsed (untyped), but not where `--` was among the operands.
  const raw = ((command.parent ?? command) as unknown as { rawArgs: string[] }).rawArgs;
  const dash = raw.indexOf("--");
  const args = dash >= 0 ? raw.slice(dash + 1) : [];
  const before = operands.slice(0, operands.length - args.length);
  if (before.length > 2) throw new CliError(`put the agent's own arguments after \`--\`: llamadock launch ${before[0]} ${before[1]} -- ${before.slice(2).join(" ")}`);
  return { ...(before[1] !== undefined ? { model: before[1] } : {}), args };
}

/** Where the agent reaches the runner: its TCP address as given, or a relay to its Unix socket. */
async function door(client: Client, options: ClientOptions, dryRun: boolean): Promise<{ baseUrl: string; apiKey: string; relay?: Relay; note?: string }> {
  const { target } = client;
  if (target.kind === "tcp") return { baseUrl: target.url, apiKey: options.apiKey ?? process.env.MODEL_RUNNER_API_KEY ?? "" };
  const note = `# ${describeTarget(target)}, relayed on a loopback port for the agent's lifetime (its key: a token of that launch)`;
  if (dryRun) return { baseUrl: "http://127.0.0.1:<port>", apiKey: "", note };
  const relay = await startRelay(target.path);
  return { baseUrl: relay.url, apiKey: relay.token, relay, note };
}

async function writeFiles(plan: AgentPlan, home: string): Promise<void> {
  await mkdir(home, { recursive: true, mode: 0o700 });
  for (const file of plan.files) {
    await mkdir(dirname(file.path), { recursive: true, mode: 0o700 });
    await writeFile(file.path, file.content, { mode: 0o600 });
  }
}

/**
 * Runs the agent with the terminal, and resolves with its exit status (128 + the signal that ended
 * it). On a terminal Ctrl-C reaches the agent itself (one process group), and must not end us
 * first nor reach it twice (Claude Code takes a second Ctrl-C as "quit"); other signals, and
 * Ctrl-C off a terminal, are passed on. Off a terminal the agent's stdin is empty: headless,
 * `codex exec` reads its stdin to its end before it starts, and a caller's pipe left open (a
 * script's, a CI runner's) kept it waiting for good.
 */
function runForeground(plan: AgentPlan, install: string): Promise<number> {
  const stdin = process.stdin.isTTY ? "inherit" : "ignore";
  const child = spawn(plan.command, plan.args, { stdio: [stdin, "inherit", "inherit"], env: { ...process.env, ...plan.env } });
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  const onInterrupt = () => {
    if (!process.stdin.isTTY) child.kill("SIGINT");
  };
  const passed: NodeJS.Signals[] = ["SIGTERM", "SIGHUP", "SIGQUIT"];
  process.on("SIGINT", onInterrupt);
  for (const signal of passed) process.on(signal, forward);
  return new Promise<number>((resolve, reject) => {
    child.once("error", (error: NodeJS.ErrnoException) =>
      reject(error.code === "ENOENT" ? new CliError(`${plan.command} is not on PATH: install it with \`${install}\``, 127) : error),
    );
    child.once("exit", (code, signal) => resolve(code ?? 128 + (signal ? constants.signals[signal] : 0)));
  }).finally(() => {
    process.off("SIGINT", onInterrupt);
    for (const signal of passed) process.off(signal, forward);
  });
}

export function launchCommand(program: Command, clientFor: ClientFor): void {
  program
    .command("launch")
    .description(`run a coding agent (${AGENT_NAMES.join(", ")}) on a model of this runner: llamadock launch AGENT [MODEL] [-- agent args]`)
    .argument("<agent>", AGENT_NAMES.join(", "))
    .argument("[model]", "default: the model loaded, else the only one in the store")
    .argument("[args...]", "the agent's own arguments, after --")
    .option("--print", "show the environment and configuration it would use, and run nothing")
    .action(async (name: string, _model: string | undefined, _args: string[], options: { print?: boolean }, command: Command) => {
      if (!isAgentName(name)) throw new CliError(`unknown agent ${name}: one of ${AGENT_NAMES.join(", ")}`);
      const agent = AGENTS[name];
      const { model: named, args } = splitOperands(command, command.args);
      const client = clientFor(command);
      const model = await chooseModel(client, named);
      const context = await contextPerRequest(client, model);
      if (context && context.tokens < agent.openingTokens) throw new CliError(tooSmall(name, model, context, agent.openingTokens));
      if (!context) process.stderr.write(`llamadock: the context of ${model} is not known: not checked against ${name}'s opening prompt (~${agent.openingTokens} tokens)\n`);

      const way = await door(client, command.optsWithGlobals() as ClientOptions, options.print === true);
      try {
        const setup: Setup = { baseUrl: way.baseUrl, apiKey: way.apiKey, model, home: agentHome(name), ...(context ? { context: context.tokens } : {}) };
        const plan = agent.plan(setup, args);
        if (options.print) {
          process.stdout.write(`${way.note ? `${way.note}\n` : ""}${describePlan(plan)}\n`);
          return;
        }
        await writeFiles(plan, setup.home);
        process.exitCode = await runForeground(plan, agent.install);
      } finally {
        way.relay?.close();
      }
    });
}

import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { CliError, createClient, type ClientOptions } from "./client.ts";
import { engineCommands } from "./engines.ts";
import { engineBuildCommands } from "./engine-builds.ts";
import { fitCommand } from "./fit.ts";
import { launchCommand } from "./launch/command.ts";
import { modelCommands } from "./models.ts";
import { pushCommands } from "./push.ts";
import { runCommand } from "./run.ts";
import { serveCommand } from "./serve.ts";
import { usageCommand } from "./usage.ts";

// `llamadock`: the model runner's command, a client of its HTTP API (see client.ts), except for
// `serve`, which starts the server. Exit status: 0 done, 1 failed, 130 interrupted.

const { version } = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };

export function buildProgram(): Command {
  const program = new Command("llamadock")
    .description("Run and manage local models: a Docker Model Runner-compatible server on llama.cpp")
    .version(version, "-v, --version", "this command's version")
    .option("--host <url>", "the model runner's URL (default: its Unix socket; env MODEL_RUNNER_HOST)")
    .option("--socket <path>", "the model runner's Unix socket (env MODEL_RUNNER_SOCK)")
    .option("--api-key <key>", "API key for a server that asks for one (env MODEL_RUNNER_API_KEY)")
    .showHelpAfterError()
    .exitOverride();
  const clientFor = (command: Command) => createClient(command.optsWithGlobals() as ClientOptions);
  serveCommand(program);
  modelCommands(program, clientFor);
  pushCommands(program, clientFor);
  runCommand(program, clientFor);
  engineCommands(program, clientFor, version);
  engineBuildCommands(program, clientFor);
  usageCommand(program, clientFor);
  fitCommand(program, clientFor);
  launchCommand(program, clientFor);
  for (const command of program.commands) command.exitOverride();
  return program;
}

async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      process.exitCode = error.exitCode;
      return;
    }
    if (error instanceof CliError) {
      process.stderr.write(`llamadock: ${error.message}\n`);
      process.exitCode = error.exitCode;
      return;
    }
    throw error;
  }
}

await main(process.argv);

import type { Command } from "commander";

// `llamadock serve [--setting=value...]`: the server itself, in this process, as `npm start` runs
// it minus the setup. The one place the command loads server code.

export function serveCommand(program: Command): void {
  program
    .command("serve")
    .description("start the model runner (settings from the environment, or --name=value as for npm start)")
    .argument("[settings...]", "e.g. --runner.port=12434")
    .allowUnknownOption()
    .helpOption("-h, --help")
    .action(async (settings: string[]) => {
      // The server reads its settings from process.argv after the script: leave it only those.
      process.argv.splice(2, process.argv.length - 2, ...settings);
      await import("../index.ts");
    });
}

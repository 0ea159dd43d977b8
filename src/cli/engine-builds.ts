import { Command } from "commander";
import { ago, formatBytes, table } from "./format.ts";
import { followPull, type ClientFor } from "./models.ts";
import { progressView } from "./progress.ts";

// `llamadock engine ls|pull|rm|use`: the llama.cpp builds runners run on (GET/POST/DELETE
// /engines/builds, POST /engines/builds/default).

type Build = { name: string; version?: string; variant?: string; digest?: string; size?: number; pulled_at?: string; reference?: string; default: boolean; runners: number; error?: string };

const print = (text: string) => process.stdout.write(`${text}\n`);

export function buildsTable(builds: Build[], now: number): string {
  const rows = builds.map((b) => [
    `${b.default ? "* " : "  "}${b.name}`,
    b.version ?? `(${b.error ?? "unknown"})`,
    b.variant ?? "",
    b.digest ? b.digest.slice(7, 19) : "",
    b.size !== undefined ? formatBytes(b.size) : "",
    String(b.runners),
    b.pulled_at ? ago(Date.parse(b.pulled_at), now) : "",
    b.reference ?? "",
  ]);
  return table(["  NAME", "VERSION", "VARIANT", "DIGEST", "SIZE", "RUNNERS", "PULLED", "REFERENCE"], rows);
}

export function engineBuildCommands(program: Command, clientFor: ClientFor): void {
  const engine = program.command("engine").description("the llama.cpp builds runners run on: list, pull, remove, choose the default");

  engine
    .command("ls")
    .description("list the builds (* marks the default)")
    .option("--json", "the API's JSON record")
    .action(async (options: { json?: boolean }, command: Command) => {
      const answer = await clientFor(command).json<{ builds: Build[] }>("GET", "/engines/builds");
      print(options.json ? JSON.stringify(answer, null, 2) : buildsTable(answer.builds, Date.now()));
    });

  engine
    .command("pull")
    .description("pull a build from a registry (llama.cpp's server images, Docker Model Runner's backend images, or ones published with npm run engine:publish)")
    .argument("<reference>")
    .action(async (reference: string, _options, command: Command) => {
      // Its layers' progress as a model pull's. Leaving cancels a pull this command started (nothing
      // of it is kept); one it joined goes on for the caller that started it.
      const cancelled = `stopped following the pull of ${reference}: cancelled, nothing kept, unless another caller started it`;
      const build = (await followPull(clientFor(command), "/engines/builds?stream=true", { reference }, progressView(), { name: reference, cancelled })) as unknown as Build;
      print(`Pulled ${build.name}: llama-server ${build.version} (${build.variant}, ${build.digest})`);
    });

  engine
    .command("rm")
    .description("remove a pulled build no runner runs and nothing names")
    .argument("<name>", "its tag, reference or digest")
    .action(async (name: string, _options, command: Command) => {
      const answer = await clientFor(command).json<{ removed: string; digest: string }>("DELETE", `/engines/builds/${encodeURIComponent(name)}`);
      print(`Removed ${answer.removed} (${answer.digest})`);
    });

  engine
    .command("use")
    .description("make a build the default: loaded runners move to it as they can, no request is dropped")
    .argument("<name>", 'its tag, reference or digest; "builtin": the llama-server found on this host')
    .action(async (name: string, _options, command: Command) => {
      const answer = await clientFor(command).json<{ default: string; version: string; runners_moving: number }>("POST", "/engines/builds/default", { name });
      print(`Default engine: ${answer.default} (${answer.version}); ${answer.runners_moving} loaded runner${answer.runners_moving === 1 ? "" : "s"} moving (see /engines/events)`);
    });
}

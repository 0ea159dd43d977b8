import { Command, InvalidArgumentError } from "commander";
import { answerJson, CliError, failure, type Client } from "./client.ts";
import { caches } from "./fit.ts";
import { ago, formatBytes, table } from "./format.ts";
import type { ClientFor } from "./models.ts";

// The runner commands: ps, unload, configure, logs, status, version.

type PsEntry = {
  model_name: string;
  mode: string;
  state: string;
  in_flight: number;
  waiting: number;
  last_used: string;
  keep_alive: string;
  /** The llama.cpp build it runs (`builtin`, or a build of `engine ls`); servers before engines leave it out. */
  engine?: string;
  /** The memory the runner was estimated to need when it was launched, and where (servers that estimate it). */
  memory?: { where: string; total_bytes: number; prompt_cache_bytes?: number; checkpoints_bytes?: number; host_bytes?: number };
};

const print = (text: string) => process.stdout.write(`${text}\n`);

const wholeNumber = (value: string) => {
  const n = Number(value);
  if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(n)) throw new InvalidArgumentError("expected a whole number");
  return n;
};

export function psTable(runners: PsEntry[], now: number): string {
  const memory = (r: PsEntry) => (r.memory ? `${formatBytes(r.memory.total_bytes)} (${r.memory.where})` : "");
  const rows = runners.map((r) => [r.model_name, r.mode, r.state, r.engine ?? "", String(r.in_flight), String(r.waiting), r.keep_alive, ago(Date.parse(r.last_used), now), memory(r), r.memory ? caches(r.memory) : ""]);
  return table(["MODEL NAME", "MODE", "STATE", "ENGINE", "IN USE", "QUEUE", "KEEP ALIVE", "LAST USED", "MEMORY", "PROMPT CACHES"], rows);
}

export function engineCommands(program: Command, clientFor: ClientFor, clientVersion: string): void {
  program
    .command("ps")
    .description("list the runners loaded now")
    .option("--json", "the API's JSON records")
    .action(async (options: { json?: boolean }, command: Command) => {
      const runners = await clientFor(command).json<PsEntry[]>("GET", "/engines/ps");
      print(options.json ? JSON.stringify(runners, null, 2) : psTable(runners, Date.now()));
    });

  program
    .command("unload")
    .description("stop the runners of models (or of all), freeing their memory")
    .argument("[models...]")
    .option("--all", "every runner")
    .action(async (models: string[], options: { all?: boolean }, command: Command) => {
      if (!options.all && models.length === 0) throw new CliError("name the models to unload, or pass --all");
      const body = options.all ? { all: true } : { models };
      const { unloaded_runners } = await clientFor(command).json<{ unloaded_runners: number }>("POST", "/engines/unload", body);
      print(`Unloaded ${unloaded_runners} runner${unloaded_runners === 1 ? "" : "s"}`);
    });

  program
    .command("configure")
    .description("set a model's runner settings (its runner reloads with them)")
    .argument("<model>")
    .option("--context-size <tokens>", "context window in tokens (-1: the model's own)", wholeNumber)
    .option("--keep-alive <duration>", 'how long an idle runner stays loaded: "10m", "0", "-1" (forever)')
    .option("--slots <n>", "requests served at once", wholeNumber)
    .option("--threads <n>", "compute threads", wholeNumber)
    .option("--mode <mode>", "completion or embedding")
    .option("--runtime-flags <flags>", "further llama-server flags, as one string")
    .option("--engine <name>", 'the llama.cpp build its runners run on (see `engine ls`; "builtin"; "default": the default engine)')
    .action(async (model: string, options: Record<string, string | number | undefined>, command: Command) => {
      const body = dropUndefined({
        model,
        mode: options.mode,
        "context-size": options.contextSize,
        keep_alive: options.keepAlive,
        slots: options.slots,
        threads: options.threads,
        "raw-runtime-flags": options.runtimeFlags,
        engine: options.engine,
      });
      const answer = await clientFor(command).json<{ model: string; settings: Record<string, unknown> }>("POST", "/engines/_configure", body, model);
      print(`Configured ${answer.model}: ${JSON.stringify(answer.settings)}`);
    });

  program
    .command("logs")
    .description("show a model's runner log (llama-server's output)")
    .argument("<model>")
    .option("-f, --follow", "keep printing what is appended")
    .option("--embedding", "the runner of embeddings, not completions")
    .action(async (model: string, options: { follow?: boolean; embedding?: boolean }, command: Command) => {
      const query = new URLSearchParams({ model, mode: options.embedding ? "embedding" : "completion", ...(options.follow ? { follow: "true" } : {}) });
      const response = await clientFor(command).raw("GET", `/engines/logs?${query}`);
      if (!response.ok || !response.body) throw await failure(response, model);
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) process.stdout.write(chunk);
    });

  program
    .command("status")
    .description("whether the model runner is running, and its inference engine")
    .action(async (_options, command: Command) => {
      const client = clientFor(command);
      const engines = await client.json<Record<string, string>>("GET", "/engines/status");
      print(`Docker Model Runner is running (${describe(client)})`);
      for (const [engine, state] of Object.entries(engines)) print(`${engine}: ${state}`);
      if (Object.values(engines).some((state) => state.startsWith("Error"))) process.exitCode = 1;
    });

  program
    .command("version")
    .description("versions of this command and of the model runner")
    .action(async (_options, command: Command) => {
      print(`Client: llamadock ${clientVersion}`);
      const response = await clientFor(command).raw("GET", "/version").catch((error: unknown) => error as CliError);
      if (response instanceof CliError) {
        print("Server: not reachable");
        throw response;
      }
      if (!response.ok) throw await failure(response);
      print(`Server: llamadock ${(await answerJson<{ version: string }>(response)).version}`);
    });
}

const describe = (client: Client) => (client.target.kind === "unix" ? `unix:${client.target.path}` : client.target.url);

function dropUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

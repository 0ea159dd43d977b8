import type { Command } from "commander";
import { answerJson, CliError, failure, lines, modelPath, type Client } from "./client.ts";
import { ago, formatBytes, shortId, splitTag, table } from "./format.ts";
import { progressView, type ProgressView } from "./progress.ts";

// The model commands: pull, ls, rm, tag, inspect, df; each one call (or a few) to /models.

type Model = { id: string; tags: string[]; created: number; config: { parameters?: string; quantization?: string; size?: string } };
type PurgeReport = { deleted: { id: string; tags: string[] }[]; removed_files: number; freed_bytes: number; incomplete_bytes: number };
type PullEvent = { type: string; message: string; layer?: { id: string; size: number; current: number } };

export type ClientFor = (command: Command) => Client;

const print = (text: string) => process.stdout.write(`${text}\n`);

/** Draws a pull's or a push's NDJSON progress; resolves with its last `success` or `error` line. */
export async function followProgress(body: ReadableStream<Uint8Array>, view: ProgressView): Promise<PullEvent | undefined> {
  let outcome: PullEvent | undefined;
  for await (const line of lines(body)) {
    if (!line.trim()) continue;
    const event = JSON.parse(line) as PullEvent;
    if (event.layer) view.layer(event.layer);
    if (event.type === "success" || event.type === "error") outcome = event;
    if (event.type === "warning") view.note(`warning: ${event.message}`);
  }
  view.stop();
  return outcome;
}

/** Pulls `model`, drawing progress; Ctrl-C cancels (the server keeps the bytes for the next pull). */
export async function pull(client: Client, model: string, view: ProgressView): Promise<string> {
  const outcome = await followPull(client, "/models/create", { from: model }, view, { name: model, cancelled: `pull of ${model} cancelled: run \`llamadock pull ${model}\` again to resume it` });
  return outcome.message;
}

/**
 * POSTs `body` to `path`, whose answer is a pull's NDJSON progress, drawing it; resolves with its
 * `success` line, else a CliError (`what.name` in its message). Ctrl-C closes the connection, which
 * tells the server to stop, and prints `what.cancelled`.
 */
export async function followPull(client: Client, path: string, body: object, view: ProgressView, what: { name: string; cancelled: string }): Promise<PullEvent & Record<string, unknown>> {
  const controller = new AbortController();
  const interrupted = () => {
    controller.abort();
    view.stop();
    process.stderr.write(`llamadock: ${what.cancelled}\n`);
    process.exit(130);
  };
  process.once("SIGINT", interrupted);
  try {
    const response = await client.raw("POST", path, body, controller.signal);
    if (!response.ok || !response.body) throw await failure(response, what.name);
    const outcome = await followProgress(response.body, view);
    if (outcome?.type === "success") return outcome as PullEvent & Record<string, unknown>;
    throw new CliError(`pull of ${what.name} failed: ${outcome?.message ?? "the server ended the stream early"}`);
  } catch (error) {
    view.stop();
    throw error;
  } finally {
    process.off("SIGINT", interrupted);
  }
}

export function modelCommands(program: Command, clientFor: ClientFor): void {
  program
    .command("pull")
    .description("download a model from a registry or Hugging Face (hf.co/...)")
    .argument("<model>", "e.g. ai/smollm2 or hf.co/owner/repo:Q4_K_M")
    .action(async (model: string, _options, command: Command) => {
      print(await pull(clientFor(command), model, progressView()));
    });

  program
    .command("ls")
    .alias("list")
    .description("list the models in the store")
    .option("--json", "the API's JSON records")
    .option("-q, --quiet", "ids only")
    .action(async (options: { json?: boolean; quiet?: boolean }, command: Command) => {
      const models = await clientFor(command).json<Model[]>("GET", "/models");
      if (options.json) print(JSON.stringify(models, null, 2));
      else if (options.quiet) models.forEach((m) => print(shortId(m.id)));
      else print(lsTable(models, Date.now()));
    });

  program
    .command("rm")
    .alias("remove")
    .description("delete models (a tag, or a model and all its tags with --force)")
    .argument("<models...>")
    .option("-f, --force", "delete a model named by id even if it has several tags")
    .action(async (models: string[], options: { force?: boolean }, command: Command) => {
      const client = clientFor(command);
      let failed = false;
      for (const model of models) {
        try {
          const done = await client.json<Record<string, string>[]>("DELETE", `/models/${modelPath(model)}${options.force ? "?force=true" : ""}`, undefined, model);
          for (const entry of done) for (const [what, name] of Object.entries(entry)) print(`${what}: ${name}`);
        } catch (error) {
          if (!(error instanceof CliError)) throw error;
          process.stderr.write(`${error.message}\n`);
          failed = true;
        }
      }
      if (failed) process.exitCode = 1;
    });

  program
    .command("tag")
    .description("give a model another name")
    .argument("<source>")
    .argument("<target>", "repository[:tag]")
    .action(async (source: string, target: string, _options, command: Command) => {
      const { repo, tag } = splitTag(target);
      const query = new URLSearchParams({ repo, ...(tag ? { tag } : {}) });
      await clientFor(command).json("POST", `/models/${modelPath(source)}/tag?${query}`, undefined, source);
      print(`Model ${source} tagged as ${repo}:${tag ?? "latest"}`);
    });

  program
    .command("inspect")
    .description("show a model's record as JSON")
    .argument("<model>")
    .action(async (model: string, _options, command: Command) => {
      print(JSON.stringify(await clientFor(command).json("GET", `/models/${modelPath(model)}`, undefined, model), null, 2));
    });

  program
    .command("purge")
    .description("free the store: what nothing uses (untagged models, stray blobs, old incomplete downloads), or --all models")
    .option("--all", "delete every model too")
    .option("--older-than <age>", "incomplete downloads count as unused once this old (90s, 15m, 1h, 2d; 0 for all)", "1h")
    .option("--json", "the API's JSON report")
    .action(async (options: { all?: boolean; olderThan: string; json?: boolean }, command: Command) => {
      const query = options.all ? "" : `?${new URLSearchParams({ unused: "true", "older-than": options.olderThan })}`;
      const report = await clientFor(command).json<PurgeReport>("DELETE", `/models/purge${query}`);
      if (options.json) {
        print(JSON.stringify(report, null, 2));
        return;
      }
      for (const { id, tags } of report.deleted) print(`Deleted: ${shortId(id)}${tags.length ? ` (${tags.join(", ")})` : ""}`);
      const incomplete = report.incomplete_bytes > 0 ? `, ${formatBytes(report.incomplete_bytes)} of it incomplete downloads` : "";
      print(`Freed ${formatBytes(report.freed_bytes)} (${report.removed_files} files${incomplete})`);
    });

  program
    .command("df")
    .description("disk space used by the model store")
    .action(async (_options, command: Command) => {
      const response = await clientFor(command).raw("GET", "/engines/df");
      if (response.status === 404) throw new CliError("this model runner has no /engines/df (it needs a newer llamadock)");
      if (!response.ok) throw await failure(response);
      print(dfTable(await answerJson<Record<string, unknown>>(response)));
    });
}

export function lsTable(models: Model[], now: number): string {
  const rows = models.flatMap((m) =>
    (m.tags.length ? m.tags : ["<none>"]).map((name) => [
      name,
      shortId(m.id),
      m.config.parameters ?? "",
      m.config.quantization ?? "",
      m.config.size ?? "",
      ago(m.created * 1000, now),
    ]),
  );
  return table(["MODEL NAME", "ID", "PARAMETERS", "QUANTIZATION", "SIZE", "CREATED"], rows);
}

/** Docker Model Runner's df fields by name; any other numeric field as it comes. */
function dfTable(body: Record<string, unknown>): string {
  const names: Record<string, string> = {
    models_disk_usage: "Models",
    default_backend_disk_usage: "Inference engine",
    reclaimable_disk_usage: "Reclaimable (llamadock purge --older-than 0)",
    incomplete_downloads_disk_usage: "  of which incomplete downloads",
  };
  const rows = Object.entries(body)
    .filter(([, value]) => typeof value === "number")
    .map(([key, value]) => [names[key] ?? key, formatBytes(value as number)]);
  return table(["TYPE", "SIZE"], rows);
}

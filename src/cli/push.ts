import type { Command } from "commander";
import { packageModel, PackageError, withShards, type PackageFiles } from "../models/package/archive.ts";
import { answerJson, CliError, failure, modelPath, type Client } from "./client.ts";
import { shortId } from "./format.ts";
import { followProgress, type ClientFor } from "./models.ts";
import { progressView, type ProgressView } from "./progress.ts";

// push: a model to the registry its name names. package: a model made from local GGUF files, as
// Docker Model Runner's CLI makes one: the artifact is built here (the files hashed, the config
// read from the GGUF header) and sent to the server as an archive (`POST /models/load`), so the
// server needs no access to this machine's files. The archive's format is the server's own
// (src/models/package), shared rather than written twice.

const print = (text: string) => process.stdout.write(`${text}\n`);

/** Pushes `model`; Ctrl-C stops the push (blobs already sent stay in the registry and are skipped next time). */
export async function push(client: Client, model: string, view: ProgressView): Promise<string> {
  const controller = new AbortController();
  const interrupted = () => {
    controller.abort();
    view.stop();
    process.stderr.write(`llamadock: push of ${model} cancelled\n`);
    process.exit(130);
  };
  process.once("SIGINT", interrupted);
  try {
    const response = await client.raw("POST", `/models/${modelPath(model)}/push`, undefined, controller.signal);
    if (!response.ok || !response.body) throw await failure(response, model);
    const outcome = await followProgress(response.body, view);
    if (outcome?.type === "success") return outcome.message;
    throw new CliError(`push of ${model} failed: ${outcome?.message ?? "the server ended the stream early"}`);
  } finally {
    view.stop();
    process.off("SIGINT", interrupted);
  }
}

type PackageOptions = { tag: string; mmproj?: string; chatTemplate?: string; license?: string[]; push?: boolean };

async function packageFiles(client: Client, files: PackageFiles, tag: string): Promise<{ id: string; tags: string[] }> {
  const packaged = await packageModel(files).catch((error: unknown) => {
    throw error instanceof PackageError ? new CliError(error.message) : error;
  });
  const view = progressView();
  const archive = packaged.archive((layer, current) => view.layer({ id: layer.digest, size: layer.size, current }));
  const headers = { "content-type": "application/x-tar", "content-length": String(packaged.size) };
  try {
    const response = await client.upload("POST", `/models/load?${new URLSearchParams({ tag })}`, archive, headers);
    view.stop();
    if (!response.ok) throw await failure(response);
    return await answerJson<{ id: string; tags: string[] }>(response);
  } catch (error) {
    view.stop();
    throw error instanceof PackageError ? new CliError(error.message) : error;
  }
}

export function pushCommands(program: Command, clientFor: ClientFor): void {
  program
    .command("push")
    .description("upload a model to the registry its name names (tag it registry/repo:tag first)")
    .argument("<model>", "e.g. registry.example.com/team/model:v1")
    .action(async (model: string, _options, command: Command) => {
      print(await push(clientFor(command), model, progressView()));
    });

  program
    .command("package")
    .description("make a model from local GGUF files (shards in their order) and add it to the store")
    .argument("<gguf...>", "the weights: one GGUF file, or every shard in order (or the first, x-00001-of-0000N.gguf, alone: the others are found beside it)")
    .requiredOption("-t, --tag <name>", "the model's name, e.g. myorg/model:v1")
    .option("--mmproj <file>", "a multimodal projector (GGUF)")
    .option("--chat-template <file>", "a Jinja chat template")
    .option("--license <file...>", "license files")
    .option("--push", "push the model once it is in the store")
    .action(async (given: string[], options: PackageOptions, command: Command) => {
      const client = clientFor(command);
      const weights = await withShards(given).catch((error: Error) => Promise.reject(new CliError(error.message)));
      const files: PackageFiles = {
        weights,
        ...(options.mmproj ? { mmproj: options.mmproj } : {}),
        ...(options.chatTemplate ? { chatTemplate: options.chatTemplate } : {}),
        ...(options.license ? { licenses: options.license } : {}),
      };
      const model = await packageFiles(client, files, options.tag);
      const name = model.tags[0] ?? options.tag;
      print(`Model packaged as ${name} (${shortId(model.id)}, ${weights.length} weights file${weights.length > 1 ? "s" : ""})`);
      if (options.push) print(await push(client, name, progressView()));
    });
}

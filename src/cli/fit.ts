import { Command, InvalidArgumentError } from "commander";
import { answerJson, failure } from "./client.ts";
import { formatBytes } from "./format.ts";
import type { ClientFor } from "./models.ts";

// `llamadock fit MODEL [--context N]`: what loading the model would do now (GET /engines/fit),
// without loading it. Exit status 0 when it fits (now or after evictions or a wait), 1 when not.

type FitRunner = { model: string; mode: string; memory_bytes: number };
type Memory = { where: string; total_bytes: number; prompt_cache_bytes?: number; checkpoints_bytes?: number; host_bytes?: number } | null;
type Budget = { budget_bytes: number; used_bytes: number } | null;

export type Fit =
  | { fits: true; model: string; action: "loaded"; context_size: number | null; memory: Memory; budget: Budget }
  | {
      fits: true;
      model: string;
      action: "load" | "evict" | "wait";
      alone: boolean;
      context_size: number | null;
      memory: Memory;
      beside: FitRunner[];
      evicts: FitRunner[];
      waits_for: FitRunner[];
      budget: Budget;
    }
  | { fits: false; model: string; error: { message: string }; fitting_context_size: number | null };

const wholeNumber = (value: string) => {
  const n = Number(value);
  if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(n) || n < -1) throw new InvalidArgumentError("expected a whole number of tokens (-1: the model's own)");
  return n;
};

const names = (list: FitRunner[]) => list.map((r) => `${r.model} (${formatBytes(r.memory_bytes)})`).join(", ");

/** The prompt caches' share of the cost: inside it on a CPU, host memory beside a GPU. */
export function caches(memory: NonNullable<Memory>): string {
  const bytes = (memory.prompt_cache_bytes ?? 0) + (memory.checkpoints_bytes ?? 0);
  if (bytes === 0) return "";
  return memory.host_bytes ? `${formatBytes(memory.host_bytes)} of host memory for prompt caches` : `${formatBytes(bytes)} of it prompt caches`;
}

/** The answer in a few lines for people. */
export function describeFit(fit: Fit): string {
  if (!fit.fits) {
    const hint = fit.fitting_context_size ? `\nIt would fit with --context ${fit.fitting_context_size}.` : "";
    return `${fit.model} does not fit: ${fit.error.message}${hint}`;
  }
  const cost = [
    fit.context_size !== null ? `context ${fit.context_size} tokens` : undefined,
    fit.memory ? `${formatBytes(fit.memory.total_bytes)} of ${fit.memory.where === "gpu" ? "GPU memory" : "memory"}` : undefined,
    fit.memory ? caches(fit.memory) || undefined : undefined,
    fit.budget ? `budget ${formatBytes(fit.budget.budget_bytes)}, ${formatBytes(fit.budget.used_bytes)} used` : undefined,
  ].filter(Boolean).join("; ");
  return cost ? `${headline(fit)}: ${cost}` : headline(fit);
}

function headline(fit: Extract<Fit, { fits: true }>): string {
  switch (fit.action) {
    case "loaded":
      return `${fit.model} is loaded`;
    case "load":
      return fit.alone ? `${fit.model} fits alone` : `${fit.model} fits beside ${names(fit.beside)}`;
    case "evict":
      return `${fit.model} fits once ${names(fit.evicts)} ${fit.evicts.length === 1 ? "is" : "are"} unloaded`;
    case "wait":
      return `${fit.model} fits, once busy ${names(fit.waits_for)} can go`;
  }
}

export function fitCommand(program: Command, clientFor: ClientFor): void {
  program
    .command("fit")
    .description("whether a model fits in memory now, and what loading it would unload (loads nothing)")
    .argument("<model>")
    .option("--context <tokens>", "with this context size (-1: the model's own)", wholeNumber)
    .option("--embedding", "for the runner of embeddings, not completions")
    .option("--json", "the API's JSON answer")
    .action(async (model: string, options: { context?: number; embedding?: boolean; json?: boolean }, command: Command) => {
      const query = new URLSearchParams({ model, mode: options.embedding ? "embedding" : "completion" });
      if (options.context !== undefined) query.set("context", String(options.context));
      const response = await clientFor(command).raw("GET", `/engines/fit?${query}`);
      if (!response.ok && response.status !== 507) throw await failure(response, model);
      const fit = await answerJson<Fit>(response);
      process.stdout.write(`${options.json ? JSON.stringify(fit, null, 2) : describeFit(fit)}\n`);
      if (!fit.fits) process.exitCode = 1;
    });
}

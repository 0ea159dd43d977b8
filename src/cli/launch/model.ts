import { answerJson, apiError, CliError, failure, modelPath, type Client } from "../client.ts";

// Which model an agent gets, and how many tokens one of its requests may hold, asked of the model
// runner: the agent's opening prompt must fit, and the agent must compact before the runner's
// context is full (each agent assumes its vendor's window otherwise).

type PsEntry = { model_name: string; mode: string };
type StoredModel = { id: string; tags: string[]; config: { context_size?: number } };
type FitAnswer = { fits: boolean; context_size: number | null; slots?: number | null };

/** The model named, else the one loaded for chat, else the only one in the store. */
export async function chooseModel(client: Client, named: string | undefined): Promise<string> {
  if (named) return named;
  const loaded = new Set((await client.json<PsEntry[]>("GET", "/engines/ps")).filter((r) => r.mode === "completion").map((r) => r.model_name));
  if (loaded.size === 1) return [...loaded][0]!;
  const stored = (await client.json<StoredModel[]>("GET", "/models")).map((m) => m.tags[0] ?? m.id);
  if (loaded.size === 0 && stored.length === 1) return stored[0]!;
  const choices = (loaded.size > 1 ? [...loaded] : stored).sort();
  if (choices.length === 0) throw new CliError("no model in the store: pull one first with `llamadock pull MODEL`");
  throw new CliError(`name the model to launch with, one of: ${choices.join(", ")}`);
}

/**
 * The tokens one request to the model may hold: the context its runner has (or would get, if it is
 * not loaded: the load's own plan, as `llamadock fit` says it) over the slots that share it.
 * Undefined when the runner does not tell (no memory budget kept and no trained context known).
 */
export type RequestContext = { tokens: number; slots: number };

export async function contextPerRequest(client: Client, model: string): Promise<RequestContext | undefined> {
  const response = await client.raw("GET", `/engines/fit?${new URLSearchParams({ model })}`);
  if (response.status === 507) throw new CliError(`${model} does not fit in memory: ${(await apiError(response)).message}`);
  if (!response.ok) throw await failure(response, model);
  const fit = await answerJson<FitAnswer>(response);
  // 0: the model's own trained context (llama-server's --ctx-size 0).
  const total = fit.context_size || (await client.json<StoredModel>("GET", `/models/${modelPath(model)}`, undefined, model)).config.context_size;
  const slots = fit.slots ?? 1;
  return total ? { tokens: Math.floor(total / slots), slots } : undefined;
}

/** The one line that says how to give a model the context an agent needs. */
export function tooSmall(agent: string, model: string, { tokens, slots }: RequestContext, needed: number): string {
  // Twice the opening prompt, to leave the agent room to work, for each of the slots that share it.
  const perRequest = Math.ceil((2 * needed) / 1024) * 1024;
  return `${model} holds ${tokens} tokens per request, but ${agent}'s opening prompt alone is about ${needed}: run \`llamadock configure ${model} --context-size ${perRequest * slots}\` (shared by its ${slots} slots) and launch again`;
}

import type { Command } from "commander";
import { table } from "./format.ts";
import type { ClientFor } from "./models.ts";

// `llamadock usage`: requests, tokens and errors per key, model and day (GET /engines/usage). A key
// sees its own; an admin key, or the Unix socket, sees every key's. CACHED is the part of the prompt
// tokens read from a slot's cache (what returning turns saved); rows kept before it was counted have 0.

type Row = { day?: string; key?: string; model?: string; requests: number; prompt_tokens: number; cached_tokens?: number; completion_tokens: number; errors: number };
type Usage = { caller: string; data: Row[]; total: Row };

const print = (text: string) => process.stdout.write(`${text}\n`);

export function usageTable({ data, total }: Usage, by: string[]): string {
  const headers = [...by.map((f) => f.toUpperCase()), "REQUESTS", "PROMPT TOKENS", "CACHED", "COMPLETION TOKENS", "ERRORS"];
  const cells = (r: Row, lead: string[]) => [...lead, String(r.requests), String(r.prompt_tokens), String(r.cached_tokens ?? 0), String(r.completion_tokens), String(r.errors)];
  const rows = data.map((r) => cells(r, by.map((f) => String(r[f as "day" | "key" | "model"] ?? ""))));
  if (by.length > 0) rows.push(cells(total, ["TOTAL", ...by.slice(1).map(() => "")]));
  return table(headers, rows);
}

export function usageCommand(program: Command, clientFor: ClientFor): void {
  program
    .command("usage")
    .description("requests, tokens and errors per API key, model and day")
    .option("--key <name>", "one key's (by its name)")
    .option("--model <model>", "one model's")
    .option("--day <YYYY-MM-DD>", "one day's (UTC)")
    .option("--since <YYYY-MM-DD>", "from this day on")
    .option("--by <fields>", "group by these, comma-separated: day, key, model", "day,key,model")
    .option("--json", "the API's JSON")
    .action(async (options: Record<string, string | boolean | undefined>, command: Command) => {
      const query = new URLSearchParams();
      for (const field of ["key", "model", "day", "since", "by"]) if (typeof options[field] === "string") query.set(field, options[field] as string);
      const usage = await clientFor(command).json<Usage>("GET", `/engines/usage?${query}`);
      print(options.json ? JSON.stringify(usage, null, 2) : usageTable(usage, String(options.by).split(",").filter(Boolean)));
    });
}

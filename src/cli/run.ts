import { createInterface } from "node:readline/promises";
import { InvalidArgumentError, type Command } from "commander";
import { CliError, failure, lines, modelPath, type Client } from "./client.ts";
import type { ClientFor } from "./models.ts";

// `llamadock run MODEL [PROMPT]`: one answer, streamed, for a prompt given (or piped in); else a
// chat that keeps its history until `/bye` or Ctrl-D, where Ctrl-C stops an answer, not the chat.

type ChatRequest = { model: string; maxTokens?: number; params?: Record<string, unknown> };
type Message = { role: "user" | "assistant" | "system"; content: string };

/**
 * The text without control characters other than newline and tab: an answer must not be able to
 * drive the terminal (clear it, move the cursor, make it answer on our input).
 */
export const printable = (text: string) => text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, "");

/** Streams one chat completion, writing its text as it comes; resolves with the whole text. */
export async function chat(client: Client, request: ChatRequest, messages: Message[], write: (text: string) => void, signal?: AbortSignal): Promise<string> {
  const { model, maxTokens, params } = request;
  const body = { ...params, model, messages, stream: true, ...(maxTokens ? { max_tokens: maxTokens } : {}) };
  const response = await client.raw("POST", "/engines/v1/chat/completions", body, signal).catch((error: unknown) => {
    if (signal?.aborted) return undefined; // interrupted before the answer began (while loading...)
    throw error;
  });
  if (!response) return "";
  if (!response.ok || !response.body) throw await failure(response, model);
  let text = "";
  try {
    for await (const line of lines(response.body)) {
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const chunk = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string | null } }[]; error?: { message?: string } };
      if (chunk.error) throw new CliError(chunk.error.message ?? "the runner failed");
      const piece = printable(chunk.choices?.[0]?.delta?.content ?? "");
      if (piece) {
        text += piece;
        write(piece);
      }
    }
  } catch (error) {
    if (!signal?.aborted) throw error;
  }
  return text;
}

/** Says "Loading" until the first words when the model has no runner ready; the model must exist. */
async function loadingNotice(client: Client, model: string): Promise<() => void> {
  const record = await client.json<{ id: string }>("GET", `/models/${modelPath(model)}`, undefined, model);
  const state = await client.raw("GET", "/engines/state");
  if (!state.ok) return () => {};
  const { runners } = (await state.json()) as { runners: { id: string; mode: string; state: string }[] };
  if (runners.some((r) => r.id === record.id && r.mode === "completion" && r.state === "ready")) return () => {};
  const tty = process.stderr.isTTY;
  process.stderr.write(tty ? `Loading ${model}...` : `Loading ${model}...\n`);
  let shown = true;
  return () => {
    if (shown && tty) process.stderr.write("\r\x1b[K");
    shown = false;
  };
}

async function readStdin(): Promise<string> {
  let text = "";
  for await (const chunk of process.stdin) text += chunk;
  return text.trim();
}

async function oneShot(client: Client, request: ChatRequest, prompt: string): Promise<void> {
  const { model } = request;
  const loaded = await loadingNotice(client, model);
  const write = (text: string) => {
    loaded();
    process.stdout.write(text);
  };
  await chat(client, request, [{ role: "user", content: prompt }], write);
  loaded();
  process.stdout.write("\n");
}

async function interactive(client: Client, request: ChatRequest): Promise<void> {
  const { model } = request;
  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: true, historySize: 100 });
  const history: Message[] = [];
  let generation: AbortController | undefined;
  let closed = false;
  rl.on("close", () => (closed = true));
  // Ctrl-C: stops the answer being written; at the prompt it only says how to leave.
  rl.on("SIGINT", () => {
    if (generation) return generation.abort();
    process.stdout.write("\nUse Ctrl + d or /bye to exit.\n");
    rl.prompt();
  });
  const loaded = await loadingNotice(client, model);
  // Load it now, not at the first question: one token of a throwaway answer.
  await client.json("POST", "/engines/v1/chat/completions", { model, messages: [{ role: "user", content: "hi" }], max_tokens: 1 }, model);
  loaded();
  process.stdout.write(`Chatting with ${model}. Type /bye to leave.\n`);
  try {
    while (!closed) {
      const prompt = (await rl.question(">>> ").catch(() => "/bye")).trim();
      if (prompt === "/bye") break;
      if (!prompt) continue;
      history.push({ role: "user", content: prompt });
      generation = new AbortController();
      try {
        const answer = await chat(client, request, history, (text) => process.stdout.write(text), generation.signal);
        process.stdout.write(generation.signal.aborted ? " [interrupted]\n\n" : "\n\n");
        history.push({ role: "assistant", content: answer });
      } catch (error) {
        // One failed question (a context too small...) does not end the chat; it leaves no trace in it.
        if (!(error instanceof CliError)) throw error;
        history.pop();
        process.stderr.write(`\nllamadock: ${error.message}\n\n`);
      } finally {
        generation = undefined;
      }
    }
  } finally {
    rl.close();
  }
}

export function runCommand(program: Command, clientFor: ClientFor): void {
  program
    .command("run")
    .description("chat with a model: answer PROMPT (or stdin) and exit, or chat until /bye")
    .argument("<model>")
    .argument("[prompt...]")
    .option("-n, --max-tokens <n>", "stop each answer after this many tokens", (v) => Number.parseInt(v, 10))
    .option("-p, --param <key=value>", "a request field for llama-server (temperature=0.2, seed=1...), repeatable", param, {})
    .action(async (model: string, words: string[], options: { maxTokens?: number; param: Record<string, unknown> }, command: Command) => {
      const client = clientFor(command);
      const request = { model, params: options.param, ...(options.maxTokens ? { maxTokens: options.maxTokens } : {}) };
      if (words.length > 0) return oneShot(client, request, words.join(" "));
      if (!process.stdin.isTTY) return oneShot(client, request, await readStdin());
      await interactive(client, request);
    });
}

/** `key=value` into the fields so far; the value as JSON when it parses (numbers, booleans), else text. */
function param(value: string, fields: Record<string, unknown>): Record<string, unknown> {
  const at = value.indexOf("=");
  if (at < 1) throw new InvalidArgumentError("expected key=value");
  const raw = value.slice(at + 1);
  let parsed: unknown = raw;
  try {
    parsed = JSON.parse(raw);
  } catch {
    // a plain string
  }
  return { ...fields, [value.slice(0, at)]: parsed };
}

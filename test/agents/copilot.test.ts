import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { counted, launch, mark, MODEL, parkedEntry, runAgent, servedSince, SMALL, startWorld, unloadParking, type Run, type Usage, type World } from "./agents.ts";

// Copilot CLI (@github/copilot, pinned in package.json) against the model runner, headless (`copilot
// -p --output-format json`), as `llamadock launch copilot` starts it: its offline BYOK mode,
// OpenAI Responses, the named key, MODEL; a second turn (`--continue`) served from llama-server's
// prompt cache, the usage Copilot records equal to what llama-server counted, and its session
// recognised by the slot table. A model too small for its opening prompt: our message, at once (one
// request, no retries).

let world: World;
beforeAll(async () => {
  world = await startWorld();
}, 180_000);
afterAll(async () => {
  await world?.stop();
});

type Event = { type: string; sessionId?: string; exitCode?: number; data?: Record<string, unknown> };
type Record_ = { inputTokens: number; outputTokens: number; cacheReadTokens: number; cacheWriteTokens: number };

/** Its JSON lines. */
function events(run: Run): Event[] {
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  return run.stdout.split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as Event);
}

const session = (list: Event[]) => list.find((e) => e.type === "result")?.sessionId;

/** Where launch keeps its state (COPILOT_HOME). */
const home = () => join(world.home, ".llamadock", "agents", "copilot");

/**
 * The usage it recorded for a session's requests (its JSON output has none): each request's
 * `session.usage_record` in the session's events file.
 */
async function recorded(id: string): Promise<Record_[]> {
  const text = await readFile(join(home(), "session-state", id, "events.jsonl"), "utf8");
  return text
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Event)
    .flatMap((e) => (e.type === "session.usage_record" ? [(e.data as { usage: Record_ }).usage] : []));
}

/** Its input counts the cached part with the rest. */
const reported = (list: Record_[]): Usage => list.reduce((sum, u) => ({ prompt: sum.prompt + u.inputTokens, cached: sum.cached + u.cacheReadTokens, output: sum.output + u.outputTokens }), { prompt: 0, cached: 0, output: 0 });

const task = (words: string, ...more: string[]) => ["-p", words, "--output-format", "json", "--allow-all-tools", ...more];

it("two turns through launch: Responses with the key on MODEL, the second turn from the cache, its usage as llama-server counted, its session in the slot table", async () => {
  const before = await mark(world);
  const first = await launch(world, "copilot", MODEL, task("Say hello."));
  const one = events(first);
  expect(first.code, first.stdout + first.stderr).toBe(0);
  const id = session(one)!;
  const turn1 = await servedSince(world, before);
  expect(turn1.ledger.requests).toBeGreaterThan(0);
  // Every request was a Responses one, answered, and counted under the named key for MODEL.
  expect(turn1.routes).toEqual({ "responses 200": turn1.ledger.requests });
  const usage1 = await recorded(id);
  console.log(`Copilot CLI's opening request: ${turn1.tasks[0]!.prompt} tokens`);
  expect(reported(usage1)).toEqual(counted(turn1.tasks));
  expect({ prompt: turn1.ledger.prompt_tokens, output: turn1.ledger.completion_tokens }).toEqual({ prompt: counted(turn1.tasks).prompt, output: counted(turn1.tasks).output });

  const middle = await mark(world);
  const second = await launch(world, "copilot", MODEL, task("And again.", "--continue"));
  const two = events(second);
  expect(second.code, second.stdout + second.stderr).toBe(0);
  expect(session(two)).toBe(id);
  const turn2 = await servedSince(world, middle);
  expect(turn2.routes).toEqual({ "responses 200": turn2.ledger.requests });
  const [next] = turn2.tasks;
  // It carries the first turn, and llama-server took all but its new tail from the cache.
  expect(next!.prompt).toBeGreaterThan(Math.max(...turn1.tasks.map((t) => t.prompt)));
  expect(next!.processed).toBeLessThan(next!.prompt / 20);
  // The session's records: both turns'.
  expect(reported(await recorded(id))).toEqual(counted([...turn1.tasks, ...turn2.tasks]));

  // The slot holding its conversation is parked under the session it named: the table knew it.
  expect(await unloadParking(world)).toHaveLength(1);
}, 900_000);

it("a model whose context is too small: it ends at once, non-zero, with our message", async () => {
  const before = await mark(world);
  const run = await runAgent(world, "copilot", SMALL, task("Say hello."));
  const list = events(run);
  expect(run.code).toBe(1);
  const failed = list.filter((e) => e.type === "model.call_failure").map((e) => e.data!);
  expect(failed.map((f) => f.statusCode)).toEqual([400]);
  const error = JSON.parse(failed[0]!.errorMessage as string) as { message: string; type: string; code: string };
  expect(error).toMatchObject({ type: "exceed_context_size_error", code: "context_too_small" });
  expect(error.message).toMatch(/^ai\/small:latest holds \d+ tokens per request, and this conversation's opening request \(its system prompt, tools and first message\) is \d+: .*`llamadock configure ai\/small:latest --context-size N`/);
  const { routes, ledger } = await servedSince(world, before);
  expect(routes).toEqual({ "responses 400": 1 });
  expect(ledger.requests).toBe(0);
}, 300_000);

import { afterAll, beforeAll, expect, it } from "vitest";
import { counted, launch, mark, MODEL, runAgent, servedSince, SMALL, startWorld, type Run, type Usage, type World } from "./agents.ts";

// Codex CLI (@openai/codex, pinned in package.json) against the model runner, headless (`codex exec
// --json`), as `llamadock launch codex` starts it: OpenAI Responses through the provider block of
// launch's config.toml, the named key, MODEL; a second turn (`exec resume --last`) served from
// llama-server's prompt cache, and the usage Codex reports equal to what llama-server counted. A
// model too small for its opening prompt: our message, at once.

let world: World;
beforeAll(async () => {
  world = await startWorld();
}, 180_000);
afterAll(async () => {
  await world?.stop();
});

type Event = { type: string; thread_id?: string; usage?: CodexUsage; error?: { message: string } };
type CodexUsage = { input_tokens: number; cached_input_tokens: number; output_tokens: number };

/** Its JSON lines. */
function events(run: Run): Event[] {
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  return run.stdout.split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as Event);
}

const thread = (list: Event[]) => list.find((e) => e.type === "thread.started")?.thread_id;

/** Codex's input counts the cached part with the rest. */
const reported = (list: Event[]): Usage => {
  const usage = list.find((e) => e.type === "turn.completed")!.usage!;
  return { prompt: usage.input_tokens, cached: usage.cached_input_tokens, output: usage.output_tokens };
};

const EXEC = ["exec", "--skip-git-repo-check", "--json"];

it("two turns through launch, its stdin a pipe left open: Responses with the key on MODEL, the second turn from the cache, its usage as llama-server counted", async () => {
  const before = await mark(world);
  // `codex exec` reads its stdin to the end before it starts: launch gives it none off a terminal.
  const first = await launch(world, "codex", MODEL, [...EXEC, "Say hello."], "open pipe");
  const one = events(first);
  expect(first.code, first.stdout + first.stderr).toBe(0);
  const turn1 = await servedSince(world, before);
  expect(turn1.ledger.requests).toBeGreaterThan(0);
  // Every request was a Responses one, answered, and counted under the named key for MODEL.
  expect(turn1.routes).toEqual({ "responses 200": turn1.ledger.requests });
  expect(reported(one)).toEqual(counted(turn1.tasks));
  expect({ prompt: turn1.ledger.prompt_tokens, output: turn1.ledger.completion_tokens }).toEqual({ prompt: counted(turn1.tasks).prompt, output: counted(turn1.tasks).output });

  const middle = await mark(world);
  const second = await launch(world, "codex", MODEL, [...EXEC, "resume", "--last", "And again."]);
  const two = events(second);
  expect(second.code, second.stdout + second.stderr).toBe(0);
  expect(thread(two)).toBe(thread(one));
  const turn2 = await servedSince(world, middle);
  expect(turn2.routes).toEqual({ "responses 200": turn2.ledger.requests });
  const [next] = turn2.tasks;
  // It carries the first turn, and llama-server took all but its new tail from the cache.
  expect(next!.prompt).toBeGreaterThan(Math.max(...turn1.tasks.map((t) => t.prompt)));
  expect(next!.processed).toBeLessThan(next!.prompt / 20);
  // A resumed thread's usage is the thread's: both turns.
  expect(reported(two)).toEqual(counted([...turn1.tasks, ...turn2.tasks]));
}, 900_000);

it("a model whose context is too small: it ends at once, non-zero, with our message as the turn's error", async () => {
  const before = await mark(world);
  const run = await runAgent(world, "codex", SMALL, [...EXEC, "Say hello."]);
  const list = events(run);
  expect(run.code).toBe(1);
  const failed = list.find((e) => e.type === "turn.failed");
  const error = JSON.parse(failed!.error!.message) as { error: { message: string; type: string; code: string } };
  expect(error.error).toMatchObject({ type: "exceed_context_size_error", code: "context_too_small" });
  expect(error.error.message).toMatch(/^ai\/small:latest holds \d+ tokens per request, and this conversation's opening request \(its system prompt, tools and first message\) is \d+: .*`llamadock configure ai\/small:latest --context-size N`/);
  // One request, refused: no retries.
  const { routes, ledger } = await servedSince(world, before);
  expect(routes).toEqual({ "responses 400": 1 });
  expect(ledger.requests).toBe(0);
}, 300_000);

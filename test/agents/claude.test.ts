import { afterAll, beforeAll, expect, it } from "vitest";
import { counted, launch, mark, MODEL, runAgent, servedSince, SMALL, startWorld, type Run, type Usage, type World } from "./agents.ts";

// Claude Code (@anthropic-ai/claude-code, pinned in package.json) against the model runner, headless
// (`claude -p`, JSON output), as `llamadock launch claude` starts it: Anthropic Messages, the named
// key, MODEL for every tier, the model's real window; a second turn (`--continue`) served from
// llama-server's prompt cache, and the usage Claude Code sums from our answers equal to what
// llama-server counted. A model too small for its opening prompt: our message, at once.

let world: World;
beforeAll(async () => {
  world = await startWorld();
}, 180_000);
afterAll(async () => {
  await world?.stop();
});

type AnthropicUsage = { input_tokens: number; cache_read_input_tokens: number; cache_creation_input_tokens: number; output_tokens: number };
type Result = { is_error: boolean; result?: string; usage: AnthropicUsage; modelUsage: Record<string, { contextWindow: number }> };

function result(run: Run): Result {
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  return JSON.parse(run.stdout) as Result;
}

/** Anthropic's split summed back: its input is what was neither read from the cache nor written to it. */
const reported = (u: AnthropicUsage): Usage => ({ prompt: u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, cached: u.cache_read_input_tokens, output: u.output_tokens });

const task = (words: string, ...more: string[]) => ["-p", words, "--output-format", "json", "--max-turns", "1", ...more];

it("two turns through launch: Anthropic Messages with the key on MODEL, its window told, the second turn from the cache, its usage as llama-server counted", async () => {
  const before = await mark(world);
  const first = await launch(world, "claude", MODEL, task("Say hello."));
  const one = result(first);
  expect({ code: first.code, is_error: one.is_error }, first.stdout).toEqual({ code: 0, is_error: false });
  // launch told it the model's window (CLAUDE_CODE_MAX_CONTEXT_TOKENS): one slot of 65536.
  expect(one.modelUsage[MODEL]?.contextWindow).toBe(65536);
  const turn1 = await servedSince(world, before);
  expect(turn1.ledger.requests).toBeGreaterThan(0);
  // Every request was Anthropic Messages, answered, and counted under the named key for MODEL.
  expect(turn1.routes).toEqual({ "messages 200": turn1.ledger.requests });
  expect(reported(one.usage)).toEqual(counted(turn1.tasks));
  expect({ prompt: turn1.ledger.prompt_tokens, output: turn1.ledger.completion_tokens }).toEqual({ prompt: counted(turn1.tasks).prompt, output: counted(turn1.tasks).output });

  const middle = await mark(world);
  const second = await launch(world, "claude", MODEL, task("And again.", "--continue"));
  const two = result(second);
  expect({ code: second.code, is_error: two.is_error }, second.stdout).toEqual({ code: 0, is_error: false });
  const turn2 = await servedSince(world, middle);
  expect(turn2.routes).toEqual({ "messages 200": turn2.ledger.requests });
  const [next] = turn2.tasks;
  // It carries the first turn (--continue), and llama-server took all but its new tail from the cache.
  expect(next!.prompt).toBeGreaterThan(Math.max(...turn1.tasks.map((t) => t.prompt)));
  expect(next!.processed).toBeLessThan(next!.prompt / 20);
  expect(reported(two.usage)).toEqual(counted(turn2.tasks));
  expect(reported(two.usage).cached).toBeGreaterThan(0.9 * reported(two.usage).prompt);
}, 900_000);

it("a model whose context is too small: it ends at once, non-zero, with our message in Anthropic's error", async () => {
  const before = await mark(world);
  const run = await runAgent(world, "claude", SMALL, task("Say hello."));
  const answer = result(run);
  expect({ code: run.code, is_error: answer.is_error }).toEqual({ code: 1, is_error: true });
  expect(answer.result).toMatch(
    /^API Error: 400 ai\/small:latest holds \d+ tokens per request, and this conversation's opening request \(its system prompt, tools and first message\) is \d+: leaving out earlier turns cannot make it fit\. Give the model a larger context \(`llamadock configure ai\/small:latest --context-size N`, shared by its slots\) and start again$/,
  );
  // Refused, every request (it tries a few shapes of the same one), and none reached MODEL.
  const { routes, ledger } = await servedSince(world, before);
  expect(Object.keys(routes)).toEqual(["messages 400"]);
  expect(ledger.requests).toBe(0);
}, 300_000);

import { afterAll, beforeAll, expect, it } from "vitest";
import { counted, launch, mark, MODEL, parkedEntry, runAgent, servedSince, SMALL, startWorld, unloadParking, type Run, type Usage, type World } from "./agents.ts";

// Qwen Code (@qwen-code/qwen-code, pinned in package.json) against the model runner, headless
// (`qwen -o json`), as `llamadock launch qwen` starts it: OpenAI chat completions through the
// provider of launch's settings.json, the named key, MODEL, its session in the header launch
// names; a second turn (`--continue`) served from llama-server's prompt cache, the usage Qwen Code
// reports equal to what llama-server counted, and its session recognised by the slot table. A
// model too small for its opening prompt: our message, at once.

let world: World;
beforeAll(async () => {
  // Its opening request is ~41k tokens of the test's vocabulary: in a 65536-token window it would
  // compact the conversation before the second turn (past the window less 33000 tokens).
  world = await startWorld(131072);
}, 180_000);
afterAll(async () => {
  await world?.stop();
});

type QwenUsage = { input_tokens: number; output_tokens: number; cache_read_input_tokens: number };
type Message = { type: string; subtype?: string; session_id?: string; is_error?: boolean; result?: string; error?: { message: string }; usage?: QwenUsage };

/** Its JSON answer: the run's messages, the result last. */
function messages(run: Run): Message[] {
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  return JSON.parse(run.stdout) as Message[];
}

const result = (list: Message[]) => list.find((m) => m.type === "result")!;

/** Its input counts the cached part with the rest. */
const reported = (list: Message[]): Usage => {
  const usage = result(list).usage!;
  return { prompt: usage.input_tokens, cached: usage.cache_read_input_tokens, output: usage.output_tokens };
};

const task = (words: string, ...more: string[]) => ["-o", "json", ...more, words];

it("two turns through launch: chat completions with the key on MODEL, the second turn from the cache, its usage as llama-server counted, its session in the slot table", async () => {
  const before = await mark(world);
  const first = await launch(world, "qwen", MODEL, task("Say hello."));
  const one = messages(first);
  expect({ code: first.code, is_error: result(one).is_error }, first.stdout + first.stderr).toEqual({ code: 0, is_error: false });
  const turn1 = await servedSince(world, before);
  // One request: memories are not extracted by requests of their own (launch turns that off).
  expect(turn1.routes).toEqual({ "chat/completions 200": 1 });
  expect(reported(one)).toEqual(counted(turn1.tasks));
  expect({ prompt: turn1.ledger.prompt_tokens, output: turn1.ledger.completion_tokens }).toEqual({ prompt: counted(turn1.tasks).prompt, output: counted(turn1.tasks).output });
  console.log(`Qwen Code's opening request: ${turn1.tasks[0]!.prompt} tokens`);

  const middle = await mark(world);
  const second = await launch(world, "qwen", MODEL, task("And again.", "--continue"));
  const two = messages(second);
  expect({ code: second.code, is_error: result(two).is_error }, second.stdout + second.stderr).toEqual({ code: 0, is_error: false });
  expect(result(two).session_id).toBe(result(one).session_id);
  const turn2 = await servedSince(world, middle);
  expect(turn2.routes).toEqual({ "chat/completions 200": 1 });
  const [next] = turn2.tasks;
  // It carries the first turn, and llama-server took all but its new tail from the cache.
  expect(next!.prompt).toBeGreaterThan(turn1.tasks[0]!.prompt);
  expect(next!.processed).toBeLessThan(next!.prompt / 20);
  // A resumed session's usage is the session's: both turns.
  expect(reported(two)).toEqual(counted([...turn1.tasks, ...turn2.tasks]));

  // The slot holding its conversation is parked under its session's name: the table knew it.
  expect(await unloadParking(world)).toEqual([parkedEntry(result(one).session_id!)]);
}, 900_000);

it("a model whose context is too small: it ends at once, non-zero, with our message", async () => {
  const before = await mark(world);
  const run = await runAgent(world, "qwen", SMALL, task("Say hello."));
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  expect(run.code).toBe(1);
  // Its JSON answer is cut short: the error comes on stderr, as JSON.
  const error = JSON.parse(run.stderr.slice(run.stderr.indexOf("{\n"))) as { error: { message: string } };
  expect(error.error.message).toMatch(/^\[API Error: 400 ai\/small:latest holds \d+ tokens per request, and this conversation's opening request \(its system prompt, tools and first message\) is \d+: .*`llamadock configure ai\/small:latest --context-size N`, shared by its slots\) and start again\]$/);
  // One request, refused: no retries.
  const { routes, ledger } = await servedSince(world, before);
  expect(routes).toEqual({ "chat/completions 400": 1 });
  expect(ledger.requests).toBe(0);
}, 300_000);

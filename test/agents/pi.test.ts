import { afterAll, beforeAll, expect, it } from "vitest";
import { counted, launch, mark, MODEL, parkedEntry, runAgent, servedSince, SMALL, startWorld, unloadParking, type Run, type Usage, type World } from "./agents.ts";

// pi (@mariozechner/pi-coding-agent, pinned in package.json) against the model runner, headless
// (`pi -p --mode json`), as `llamadock launch pi` starts it: OpenAI chat completions through the
// provider of launch's models.json, the named key, MODEL, its session in the headers launch turns
// on; a second turn (`--continue`) served from llama-server's prompt cache, the usage pi reports
// equal to what llama-server counted, and the session recognised by the slot table. A model too
// small for its opening prompt: our message, at once.

let world: World;
beforeAll(async () => {
  world = await startWorld();
}, 180_000);
afterAll(async () => {
  await world?.stop();
});

type PiUsage = { input: number; output: number; cacheRead: number; cacheWrite: number };
type Message = { role: string; usage?: PiUsage; stopReason?: string };
type Event = { type: string; id?: string; message?: Message };

/** Its JSON lines. */
function events(run: Run): Event[] {
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  return run.stdout.split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as Event);
}

const session = (list: Event[]) => list.find((e) => e.type === "session")?.id;

const answers = (list: Event[]) => list.flatMap((e) => (e.type === "message_end" && e.message?.role === "assistant" ? [e.message] : []));

/** Its answers' usage summed: its input is what was neither read from the cache nor written to it. */
const reported = (list: Event[]): Usage =>
  answers(list)
    .map((m) => m.usage!)
    .reduce((sum, u) => ({ prompt: sum.prompt + u.input + u.cacheRead + u.cacheWrite, cached: sum.cached + u.cacheRead, output: sum.output + u.output }), { prompt: 0, cached: 0, output: 0 });

const task = (words: string, ...more: string[]) => ["--mode", "json", ...more, "-p", words];

it("two turns through launch: chat completions with the key on MODEL, the second turn from the cache, its usage as llama-server counted, its session in the slot table", async () => {
  const before = await mark(world);
  const first = await launch(world, "pi", MODEL, task("Say hello."));
  const one = events(first);
  expect(first.code, first.stdout + first.stderr).toBe(0);
  expect(answers(one).map((m) => m.stopReason)).toEqual(["stop"]);
  const turn1 = await servedSince(world, before);
  expect(turn1.ledger.requests).toBeGreaterThan(0);
  // Every request was OpenAI chat, answered, and counted under the named key for MODEL.
  expect(turn1.routes).toEqual({ "chat/completions 200": turn1.ledger.requests });
  expect(reported(one)).toEqual(counted(turn1.tasks));
  expect({ prompt: turn1.ledger.prompt_tokens, output: turn1.ledger.completion_tokens }).toEqual({ prompt: counted(turn1.tasks).prompt, output: counted(turn1.tasks).output });
  console.log(`pi's opening request: ${turn1.tasks[0]!.prompt} tokens`);

  const middle = await mark(world);
  const second = await launch(world, "pi", MODEL, task("And again.", "--continue"));
  const two = events(second);
  expect(second.code, second.stdout + second.stderr).toBe(0);
  expect(session(two)).toBe(session(one));
  const turn2 = await servedSince(world, middle);
  expect(turn2.routes).toEqual({ "chat/completions 200": turn2.ledger.requests });
  const [next] = turn2.tasks;
  // It carries the first turn, and llama-server took all but its new tail from the cache.
  expect(next!.prompt).toBeGreaterThan(Math.max(...turn1.tasks.map((t) => t.prompt)));
  expect(next!.processed).toBeLessThan(next!.prompt / 20);
  expect(reported(two)).toEqual(counted(turn2.tasks));

  // The slot holding its conversation is parked under its session's name: the table knew it.
  expect(await unloadParking(world)).toEqual([parkedEntry(session(one)!)]);
}, 900_000);

it("a model whose context is too small: it ends at once, non-zero, with our message (its text mode: the JSON one ends with 0 whatever its answer)", async () => {
  const before = await mark(world);
  const run = await runAgent(world, "pi", SMALL, ["-p", "Say hello."]);
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  expect(run.code).toBe(1);
  expect(run.stderr).toMatch(/^400 ai\/small:latest holds \d+ tokens per request, and this conversation's opening request \(its system prompt, tools and first message\) is \d+: .*`llamadock configure ai\/small:latest --context-size N`, shared by its slots\) and start again\n$/);
  // One request, refused: no retries.
  const { routes, ledger } = await servedSince(world, before);
  expect(routes).toEqual({ "chat/completions 400": 1 });
  expect(ledger.requests).toBe(0);
}, 300_000);

import { afterAll, beforeAll, expect, it } from "vitest";
import { counted, launch, mark, MODEL, runAgent, servedSince, SMALL, startWorld, type Run, type Task, type Usage, type World } from "./agents.ts";

// opencode (opencode-ai, pinned in package.json) against the model runner, headless (`opencode run
// --format json`), as `llamadock launch opencode` starts it: OpenAI chat completions through the
// provider entry of launch's opencode.json (the AI SDK's openai-compatible provider, which opencode
// carries within it: nothing is fetched when it runs), the named key, MODEL; a second turn
// (`--continue`) served from llama-server's prompt cache, and the usage opencode reports equal to
// what llama-server counted. A model too small for its opening prompt: our message, at once.

let world: World;
beforeAll(async () => {
  world = await startWorld();
}, 180_000);
afterAll(async () => {
  await world?.stop();
});

type Tokens = { input: number; output: number; cache: { read: number; write: number } };
type Event = { type: string; sessionID?: string; part?: { type: string; tokens?: Tokens }; error?: { name: string; data: { message: string } } };

/** Its JSON lines. */
function events(run: Run): Event[] {
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  return run.stdout.split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as Event);
}

const session = (list: Event[]) => new Set(list.map((e) => e.sessionID));

/** The steps' tokens summed: its input is what was neither read from the cache nor written to it. */
const reported = (list: Event[]): Usage =>
  list
    .flatMap((e) => (e.type === "step_finish" && e.part?.tokens ? [e.part.tokens] : []))
    .reduce((sum, t) => ({ prompt: sum.prompt + t.input + t.cache.read + t.cache.write, cached: sum.cached + t.cache.read, output: sum.output + t.output }), { prompt: 0, cached: 0, output: 0 });

/**
 * The requests of its session's steps: those with its system prompt and tools. The title of a new
 * session is asked for apart (the small model, here MODEL too: a prompt of its own, under 4k
 * tokens), and is not in the steps' tokens.
 */
const steps = (tasks: Task[]) => tasks.filter((t) => t.prompt > 4096);

const RUN = ["run", "--format", "json"];

it("two turns through launch: chat completions with the key on MODEL, the second turn from the cache, its usage as llama-server counted", async () => {
  const before = await mark(world);
  const first = await launch(world, "opencode", MODEL, [...RUN, "Say hello."]);
  const one = events(first);
  expect(first.code, first.stdout + first.stderr).toBe(0);
  expect(one.filter((e) => e.type === "error")).toEqual([]);
  const turn1 = await servedSince(world, before);
  expect(steps(turn1.tasks).length).toBeGreaterThan(0);
  // Every request was OpenAI chat, answered, and counted under the named key for MODEL.
  expect(turn1.routes).toEqual({ "chat/completions 200": turn1.ledger.requests });
  expect(reported(one)).toEqual(counted(steps(turn1.tasks)));
  expect({ prompt: turn1.ledger.prompt_tokens, output: turn1.ledger.completion_tokens }).toEqual({ prompt: counted(turn1.tasks).prompt, output: counted(turn1.tasks).output });

  const middle = await mark(world);
  const second = await launch(world, "opencode", MODEL, [...RUN, "--continue", "And again."]);
  const two = events(second);
  expect(second.code, second.stdout + second.stderr).toBe(0);
  expect(session(two)).toEqual(session(one));
  const turn2 = await servedSince(world, middle);
  expect(turn2.routes).toEqual({ "chat/completions 200": turn2.ledger.requests });
  const [next] = steps(turn2.tasks);
  // It carries the first turn, and llama-server took all but its new tail from the cache.
  expect(next!.prompt).toBeGreaterThan(Math.max(...steps(turn1.tasks).map((t) => t.prompt)));
  expect(next!.processed).toBeLessThan(next!.prompt / 20);
  expect(reported(two)).toEqual(counted(steps(turn2.tasks)));
}, 900_000);

it("a model whose context is too small: it ends at once, non-zero, with our message (not an overflow it would compact away, again and again)", async () => {
  const before = await mark(world);
  const run = await runAgent(world, "opencode", SMALL, [...RUN, "Say hello."]);
  const list = events(run);
  expect(run.code).toBe(1);
  const errors = list.filter((e) => e.type === "error");
  expect(errors).toHaveLength(1);
  expect(errors[0]!.error!.name).toBe("APIError");
  expect(errors[0]!.error!.data.message).toMatch(/^ai\/small:latest holds \d+ tokens per request, and this conversation's opening request \(its system prompt, tools and first message\) is \d+: .*`llamadock configure ai\/small:latest --context-size N`/);
  // Its one step refused (its title, a short prompt of its own, fits and is answered).
  const { routes } = await servedSince(world, before);
  expect(routes["chat/completions 400"]).toBe(1);
  expect(Object.keys(routes).filter((r) => r.endsWith(" 400") || r.endsWith(" 500"))).toEqual(["chat/completions 400"]);
}, 300_000);

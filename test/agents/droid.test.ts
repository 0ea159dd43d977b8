import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { converse, counted, launch, mark, MODEL, parkedEntry, runAgent, servedSince, SMALL, startWorld, unloadParking, type Run, type Usage, type World } from "./agents.ts";

// Droid (@factory/cli, pinned in package.json) against the model runner, as `llamadock launch
// droid` sets it up: its airgap mode, a custom model speaking OpenAI Responses, the named key,
// MODEL. Headless one turn through launch (`droid exec -o json`): the usage it reports equal to
// what llama-server counted, and its session recognised by the slot table. Offline, `droid exec
// -s ID` cannot continue a session (it asks Factory's service for it, which airgap mode forbids),
// so two turns are one process of its JSON-RPC mode (`exec --input-format stream-jsonrpc`), the
// second served from llama-server's prompt cache. A model too small for its opening prompt: our
// message, at once.

let world: World;
beforeAll(async () => {
  world = await startWorld();
}, 180_000);
afterAll(async () => {
  await world?.stop();
});

type ExecUsage = { input_tokens: number; output_tokens: number; cache_read_input_tokens: number; cache_creation_input_tokens: number };
type Result = { type: string; is_error: boolean; session_id: string; result?: string; usage: ExecUsage };

function result(run: Run): Result {
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  return JSON.parse(run.stdout.trim().split("\n").at(-1)!) as Result;
}

/** Anthropic's split summed back: its input is what was neither read from the cache nor written to it. */
const reported = (u: ExecUsage): Usage => ({ prompt: u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, cached: u.cache_read_input_tokens, output: u.output_tokens });

it("one turn through launch (exec): Responses with the key on MODEL, its usage as llama-server counted, its session in the slot table", async () => {
  const before = await mark(world);
  const run = await launch(world, "droid", MODEL, ["exec", "-o", "json", "Say hello."]);
  const answer = result(run);
  expect({ code: run.code, is_error: answer.is_error }, run.stdout + run.stderr).toEqual({ code: 0, is_error: false });
  const served = await servedSince(world, before);
  // Every request was a Responses one, answered, and counted under the named key for MODEL.
  expect(served.routes).toEqual({ "responses 200": served.ledger.requests });
  expect(reported(answer.usage)).toEqual(counted(served.tasks));
  expect({ prompt: served.ledger.prompt_tokens, output: served.ledger.completion_tokens }).toEqual({ prompt: counted(served.tasks).prompt, output: counted(served.tasks).output });
  console.log(`Droid's opening request (exec): ${served.tasks[0]!.prompt} tokens`);
  // The slot holding its conversation is parked under its session's name: the table knew it.
  expect(await unloadParking(world)).toEqual([parkedEntry(answer.session_id)]);
}, 900_000);

type Rpc = { type: string; id?: string; error?: unknown; result?: { sessionId: string }; params?: { notification?: { type: string } } };
type DroidUsage = { inputTokens: number; outputTokens: number; cacheReadTokens: number; cacheCreationTokens: number };

/** The usage Droid keeps for a session (its JSON-RPC notifications of it lag a request behind, and the last may never come). */
async function kept(home: string, id: string): Promise<Usage> {
  const folder = join(home, ".factory", "sessions");
  const [project] = await readdir(folder);
  const { tokenUsage: u } = JSON.parse(await readFile(join(folder, project!, `${id}.settings.json`), "utf8")) as { tokenUsage: DroidUsage };
  return { prompt: u.inputTokens + u.cacheReadTokens + u.cacheCreationTokens, cached: u.cacheReadTokens, output: u.outputTokens };
}

it("two turns of one session (its JSON-RPC mode, as launch sets it up): the second from the cache, its usage as llama-server counted", async () => {
  const request = (id: string, method: string, params: object) => JSON.stringify({ jsonrpc: "2.0", type: "request", factoryApiVersion: "1.0.0", id, method, params });
  const parse = (line: string) => JSON.parse(line) as Rpc;
  const answered = (id: string) => (line: string) => parse(line).type === "response" && parse(line).id === id;
  const turnDone = (line: string) => parse(line).params?.notification?.type === "agent_turn_completed";
  const marks = [await mark(world)];
  let id = "";
  const run = await converse(world, "droid", 65536, ["exec", "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc"], async (say, hear) => {
    say(request("1", "droid.initialize_session", { machineId: "test", cwd: world.work }));
    const started = parse(await hear(answered("1")));
    expect(started.error).toBeUndefined();
    id = started.result!.sessionId;
    for (const [n, words] of [["2", "Say hello."], ["3", "And again."]] as const) {
      say(request(n, "droid.add_user_message", { text: words }));
      await hear(turnDone);
      marks.push(await mark(world));
    }
  });
  expect(run.code, run.stderr).toBe(0);
  const all = await servedSince(world, marks[0]!);
  // Its requests: each turn's, and the session's title (a short prompt of its own, after the first message).
  expect(all.routes).toEqual({ "responses 200": 3 });
  const turn1 = (await servedSince(world, marks[0]!)).tasks.slice(0, marks[1]!.tasks - marks[0]!.tasks);
  const opening = Math.max(...turn1.map((t) => t.prompt));
  console.log(`Droid's opening request (interactive, JSON-RPC): ${opening} tokens`);
  const next = all.tasks.at(-1)!;
  // It carries the first turn, and llama-server took all but its new tail from the cache.
  expect(next.prompt).toBeGreaterThan(opening);
  expect(next.processed).toBeLessThan(next.prompt / 20);
  expect(await kept(join(world.home, "plans", "droid"), id)).toEqual(counted(all.tasks));
}, 900_000);

it("a model whose context is too small: it ends at once, non-zero, with our message", async () => {
  const before = await mark(world);
  // Its JSON result says only "Exec failed": its stream of events has the server's words.
  const run = await runAgent(world, "droid", SMALL, ["exec", "-o", "stream-json", "Say hello."]);
  expect(run.killed, `killed after its time; stderr: ${run.stderr}`).toBe(false);
  expect(run.code).toBe(1);
  const errors = run.stdout.split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as { type: string; source?: string; message?: string }).filter((e) => e.type === "error");
  expect(errors.map((e) => e.source)).toEqual(["agent_loop", "cli"]);
  expect(errors[0]!.message).toMatch(/^400 ai\/small:latest holds \d+ tokens per request, and this conversation's opening request \(its system prompt, tools and first message\) is \d+: .*`llamadock configure ai\/small:latest --context-size N`, shared by its slots\) and start again$/);
  // One request, refused: no retries.
  const { routes, ledger } = await servedSince(world, before);
  expect(routes).toEqual({ "responses 400": 1 });
  expect(ledger.requests).toBe(0);
}, 300_000);

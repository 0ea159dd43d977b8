import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./harness.ts";
import { ask } from "../support/http.ts";

// Agent sessions sharing a runner, end to end: the server under Bun, the tiny chat model (a BPE
// vocabulary of about one token per byte, a ChatML template) from a real registry, one real
// llama-server runner of three slots. What shows where a prompt was processed is llama-server's
// own count of the tokens it processed and took from its cache (`timings.prompt_n`, `cache_n`).

const SLOTS = 3;
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    models: [],
    shaped: { "ai/agent": { vocabulary: "bpe", seed: 1, context: 16384 } },
    env: { INFERENCE_SLOTS: String(SLOTS), INFERENCE_THREADS: "2" },
  });
}, 120_000);
afterAll(async () => {
  await stack?.stop();
});

/** An agent's start: a long system prompt and its tools, the same for every session of that agent. */
const system = (agent: string) => `You are ${agent}, a coding agent.\n${Array.from({ length: 120 }, (_, i) => `Rule ${i}: read the files before you change them.`).join("\n")}`;
const TOOLS = [{ type: "function", function: { name: "read_file", description: "Reads a file.", parameters: { type: "object", properties: { path: { type: "string" } } } } }];
type Message = { role: string; content: string };
type Timings = { prompt_n: number; cache_n: number };

/** One turn of a session: its messages so far after the agent's start, the session named as OpenAI's `user`. */
async function turn(agent: string, session: string, messages: Message[], headers?: Record<string, string>): Promise<Timings> {
  const body = { model: "ai/agent", messages: [{ role: "system", content: system(agent) }, ...messages], tools: TOOLS, user: session, max_tokens: 2, temperature: 0 };
  const answer = await ask({ url: stack.url }, "POST", "/v1/chat/completions", body, headers);
  expect(answer.status, answer.body).toBe(200);
  return answer.json().timings as Timings;
}

describe("agent sessions sharing a runner", () => {
  it("a session's second turn lands on its slot and reuses its whole conversation, though another session ran between", async () => {
    // Its own conversation is long too (a file it read): sent elsewhere, this is what it would process again.
    const file = Array.from({ length: 40 }, (_, i) => `export const value${i} = parse(input${i});`).join("\n");
    const first = [{ role: "user", content: `Fix the failing test in parser.ts, please. It reads:\n${file}` }];
    const opened = await turn("alpha", "session-a", first);
    expect(opened.prompt_n).toBeGreaterThan(4000);
    await turn("alpha", "session-b", [{ role: "user", content: "Write a README for this folder." }]);
    const second = [...first, { role: "assistant", content: "I read parser.ts." }, { role: "user", content: "Now run the tests." }];
    const again = await turn("alpha", "session-a", second);
    expect(again.cache_n, JSON.stringify(again)).toBeGreaterThanOrEqual(opened.prompt_n);
    expect(again.prompt_n).toBeLessThan(60);
  });

  it("Claude Code's session (its header, on /v1/messages) is left to llama-server's own choice of slot, which finds its conversation", async () => {
    const messages = (extra: object[]) => [{ role: "user", content: "Fix the failing test in parser.ts, please." }, ...extra];
    const send = async (extra: object[]) => {
      const body = { model: "ai/agent", system: system("gamma"), messages: messages(extra), max_tokens: 2, temperature: 0 };
      const answer = await ask({ url: stack.url }, "POST", "/v1/messages", body, { "x-claude-code-session-id": "claude-1" });
      expect(answer.status, answer.body).toBe(200);
      return answer.json().usage as { input_tokens: number; cache_read_input_tokens: number };
    };
    const opened = await send([]);
    const again = await send([{ role: "assistant", content: "I read it." }, { role: "user", content: "Run the tests." }]);
    expect(again.cache_read_input_tokens, JSON.stringify(again)).toBeGreaterThanOrEqual(opened.input_tokens + opened.cache_read_input_tokens - 1);
  });

  it("K sessions opened together over one long start process it about once between them", async () => {
    const tasks = ["Fix the bug in lexer.ts.", "Add a test for the CLI.", "Explain the build script."];
    const opened = await Promise.all(tasks.map((task, i) => turn("beta", `session-${i}`, [{ role: "user", content: task }])));
    const processed = opened.map((t) => t.prompt_n);
    const start = Math.max(...processed);
    expect(start).toBeGreaterThan(4000);
    // The first processes the start; each of the others only its own task, after a copy of the first's slot.
    expect(processed.reduce((a, b) => a + b, 0), `prompt_n of each: ${processed.join(", ")}`).toBeLessThan(1.1 * start);
    expect(opened.filter((t) => t.cache_n > 4000), JSON.stringify(opened)).toHaveLength(SLOTS - 1);
  });
});

/** Each session's own long history (a file it read, its own): what it would process again on a slot that lost it. */
const history = (session: string) => `Fix the failing test in ${session}.ts, please. It reads:\n${Array.from({ length: 30 }, (_, i) => `export const ${session}${i} = parse(input${i});`).join("\n")}`;
const second = (session: string) => [{ role: "user", content: history(session) }, { role: "assistant", content: "I read it." }, { role: "user", content: "Now run the tests." }];

const folderPath = () => join(stack.dir, "models", "slot-cache");

/** Parked entries in the slot-cache folder (named for a session, not a slot), with their sizes. */
async function parked(): Promise<number[]> {
  const folder = folderPath();
  // No runner loaded yet: no folder.
  const names = (await readdir(folder).catch(() => [] as string[])).filter((name) => /-p[0-9a-f]{32}\.bin$/.test(name));
  return Promise.all(names.map(async (name) => (await stat(join(folder, name))).size));
}

describe("more sessions than slots (K = 2x the slots): parking", () => {
  const sessions = (tag: string) => Array.from({ length: 2 * SLOTS }, (_, i) => `${tag}-${i}`);

  /** Every session's first turn, then every session's second, one request at a time: each second turn finds its slot given away. */
  async function twoTurns(agent: string, tag: string) {
    const before = (await parked()).length;
    const first: Timings[] = [];
    for (const session of sessions(tag)) first.push(await turn(agent, session, [{ role: "user", content: history(session) }]));
    const whileParked = await parked();
    const again: Timings[] = [];
    for (const session of sessions(tag)) again.push(await turn(agent, session, second(session)));
    return { first, again, before, whileParked };
  }

  it("with parking, every session's second turn processes only its new tokens", async () => {
    const { first, again, before, whileParked } = await twoTurns("delta", "parked");
    // Each session given a slot displaced one (the earlier tests' sessions, then these): all parked.
    expect(whileParked.length - before, "entries parked by the first turns").toBe(2 * SLOTS);
    console.log(`parked entries: ${whileParked.join(", ")} bytes; these sessions' conversations: ${first.map((t) => t.prompt_n + t.cache_n).join(", ")} tokens`);
    for (const [i, t] of again.entries()) {
      expect(t.prompt_n, `second turn of session ${i}: ${JSON.stringify(t)}`).toBeLessThan(60);
      expect(t.cache_n).toBeGreaterThanOrEqual(first[i]!.prompt_n + first[i]!.cache_n);
    }
    // Restored entries leave the folder: each second turn unparked one and parked the one it displaced.
    expect(await parked()).toHaveLength(whileParked.length);
  });

  it("without parking (INFERENCE_SLOT_PARKING=false), a session whose slot was given away processes its history again", async () => {
    await stack.restart({ INFERENCE_SLOT_PARKING: "false" });
    const { again, before, whileParked } = await twoTurns("epsilon", "unparked");
    expect(whileParked.length - before).toBe(0);
    const own = history("unparked-0").length / 2; // about one token per byte: well below a history's tokens
    expect(again.filter((t) => t.prompt_n > own), JSON.stringify(again)).toHaveLength(2 * SLOTS);
  });
});

describe("parked sessions across a restart and a reload", () => {
  /** First turns of SLOTS + `count` sessions, one at a time: the first `count` are parked, by the last ones. */
  async function parkFirst(agent: string, tag: string, headers?: Record<string, string>, count = 1) {
    const before = (await parked()).length;
    const first: Timings[] = [];
    for (let i = 0; i < SLOTS + count; i++) first.push(await turn(agent, `${tag}-${i}`, [{ role: "user", content: history(`${tag}-${i}`) }], headers));
    expect((await parked()).length - before, "entries parked by the first turns").toBe(count);
    return first[0]!;
  }
  /** Processed only its new tokens: its whole conversation (the first turn's prompt) came from its restored slot. */
  const onlyNew = (t: Timings, first: Timings) => {
    expect(t.prompt_n, JSON.stringify(t)).toBeLessThan(60);
    expect(t.cache_n).toBeGreaterThanOrEqual(first.prompt_n + first.cache_n);
  };

  it("a session parked before a restart, or before its runner's reload, processes only its new tokens when it comes back", async () => {
    await stack.restart(); // parking on again, after the test above turned it off
    const first = await parkFirst("zeta", "restart");
    await stack.restart();
    const before = (await parked()).length;
    const again = await turn("zeta", "restart-0", second("restart-0"));
    onlyNew(again, first);
    expect(await parked(), "the restored entry leaves the folder").toHaveLength(before - 1);
    // Parked again (by three new sessions), then its runner unloaded and loaded again.
    for (let i = SLOTS + 1; i <= 2 * SLOTS; i++) await turn("zeta", `restart-${i}`, [{ role: "user", content: history(`restart-${i}`) }]);
    expect(await parked()).toHaveLength(before);
    expect((await ask({ url: stack.url }, "POST", "/engines/unload", { all: true })).status).toBe(200);
    const third = [...second("restart-0"), { role: "assistant", content: "They pass." }, { role: "user", content: "Commit it." }];
    onlyNew(await turn("zeta", "restart-0", third), { prompt_n: again.prompt_n + again.cache_n, cache_n: 0 });
  });

  it("a session parked under one key is never restored for another key naming it, before or after a restart", async () => {
    const keys = join(stack.dir, "agent-keys");
    await writeFile(keys, "sk-alice-park-53 name=alice admin\nsk-bob-park-59 name=bob\n");
    await stack.restart({ API_KEYS_FILE: keys });
    const alice = { authorization: "Bearer sk-alice-park-53" };
    const bob = { authorization: "Bearer sk-bob-park-59" };
    const first = await parkFirst("eta", "keyed", alice);
    // Bob names alice's parked session and sends her conversation: he processes it, as a new session would.
    const own = history("keyed-0").length / 2; // about one token per byte: well below its tokens
    const guessed = await turn("eta", "keyed-0", second("keyed-0"), bob);
    expect(guessed.prompt_n, JSON.stringify(guessed)).toBeGreaterThan(own);
    await stack.restart({ API_KEYS_FILE: keys });
    const entries = (await parked()).length;
    const after = await turn("eta", "keyed-0", second("keyed-0"), bob);
    expect(after.prompt_n, JSON.stringify(after)).toBeGreaterThan(own);
    expect(await parked(), "alice's entry is still there").toHaveLength(entries);
    // Alice's own session gets it back.
    onlyNew(await turn("eta", "keyed-0", second("keyed-0"), alice), first);
    expect(await parked()).toHaveLength(entries - 1);
  });

  it("a parked file that is damaged, or was saved with another KV cache type, is not restored: its session processes its history again, answered", async () => {
    await stack.restart(); // no keys again
    const names = async () => (await readdir(folderPath())).filter((name) => /-p[0-9a-f]{32}\.bin$/.test(name));
    const before = new Set(await names());
    await parkFirst("theta", "moved", undefined, 2);
    // Parked in turn: moved-0's entry first, then moved-1's.
    const fresh = (await names()).filter((name) => !before.has(name));
    const [saved0, saved1] = await Promise.all(fresh.map(async (name) => ({ name, at: (await stat(join(folderPath(), name))).mtimeMs }))).then((all) => all.sort((a, b) => a.at - b.at).map((e) => e.name));
    const own = history("moved-0").length / 2;
    // Damaged: same size, other bytes in the middle of its KV data.
    const bytes = await readFile(join(folderPath(), saved1!));
    bytes.fill(0x5a, bytes.length >> 1, (bytes.length >> 1) + 4096);
    await writeFile(join(folderPath(), saved1!), bytes);
    await stack.restart();
    const damaged = await turn("theta", "moved-1", second("moved-1"));
    expect(damaged.prompt_n, JSON.stringify(damaged)).toBeGreaterThan(own);
    expect(stack.server.output()).toMatch(/slot cache: \S+-p[0-9a-f]{32}\.bin does not match its runner or is damaged: removed/);
    expect(stack.server.output()).toMatch(/slot cache: \S+: a parked conversation is gone \(dropped for the folder's budget, or unsound\): its session processes it again/);
    expect(await names()).not.toContain(saved1);
    // Another KV cache type: the runner loaded with it never finds the file its predecessor parked.
    const configured = await ask({ url: stack.url }, "POST", "/engines/_configure", { model: "ai/agent", "runtime-flags": ["--cache-type-k", "f32"] });
    expect(configured.status, configured.body).toBe(202);
    const other = await turn("theta", "moved-0", second("moved-0"));
    expect(other.prompt_n, JSON.stringify(other)).toBeGreaterThan(own);
    expect(await names(), "left for a runner of its own settings").toContain(saved0);
  });
});

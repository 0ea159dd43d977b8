import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";
import { ask, openStream } from "../support/http.ts";
import { until } from "../support/until.ts";

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
type Timings = { prompt_n: number; cache_n: number; predicted_n: number };

/** One turn of a session: its messages so far after the agent's start, the session named as OpenAI's `user`. */
async function turn(agent: string, session: string, messages: Message[], reply: object = { max_tokens: 2 }, headers?: Record<string, string>): Promise<Timings> {
  const body = { model: "ai/agent", messages: [{ role: "system", content: system(agent) }, ...messages], tools: TOOLS, user: session, temperature: 0, ...reply };
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

  it("Claude Code's session (its header, on /v1/messages) lands on its slot and reuses its whole conversation, though other sessions ran between", async () => {
    const messages = (extra: object[]) => [{ role: "user", content: "Fix the failing test in parser.ts, please." }, ...extra];
    const send = async (extra: object[]) => {
      const body = { model: "ai/agent", system: system("gamma"), messages: messages(extra), max_tokens: 2, temperature: 0 };
      const answer = await ask({ url: stack.url }, "POST", "/v1/messages", body, { "x-claude-code-session-id": "claude-1" });
      expect(answer.status, answer.body).toBe(200);
      return answer.json().usage as { input_tokens: number; cache_read_input_tokens: number };
    };
    const opened = await send([]);
    // Other sessions of the same agent on every other slot (llama-server alone would have picked any free slot for them).
    await Promise.all(Array.from({ length: SLOTS }, (_, i) => turn("gamma", `other-${i}`, [{ role: "user", content: `Task ${i}: write the docs.` }])));
    const again = await send([{ role: "assistant", content: "I read it." }, { role: "user", content: "Run the tests." }]);
    expect(again.cache_read_input_tokens, JSON.stringify(again)).toBeGreaterThanOrEqual(opened.input_tokens + opened.cache_read_input_tokens - 1);
  });

  it("K sessions opened together over one long start process it about once between them", async () => {
    const tasks = ["Fix the bug in lexer.ts.", "Add a test for the CLI.", "Explain the build script."];
    const before = await processedTokens();
    const opened = await Promise.all(tasks.map((task, i) => turn("beta", `session-${i}`, [{ role: "user", content: task }])));
    const start = Math.max(...opened.map((t) => t.prompt_n + t.cache_n));
    expect(start).toBeGreaterThan(4000);
    // The first's prompt is processed alone first (a request of ours that generates nothing, counted
    // in its answer); each of the others, after a copy of its slot, processes only its own task.
    expect((await processedTokens()) - before, JSON.stringify(opened)).toBeLessThan(1.1 * start);
    expect(opened.reduce((sum, t) => sum + t.prompt_n, 0), JSON.stringify(opened)).toBeLessThan(1.1 * start);
    expect(opened.filter((t) => t.cache_n > 4000), JSON.stringify(opened)).toHaveLength(SLOTS - 1);
  });

  /** The runner's requests holding a slot (`in_flight`) or waiting for one (`queue_depth`), from /metrics. */
  async function gauge(family: "requests_in_flight" | "queue_depth"): Promise<number> {
    const metrics = (await ask({ url: stack.url }, "GET", "/metrics")).body;
    return Number(new RegExp(`llamadock_${family}\\{model="[^"]*ai/agent:latest",mode="completion"\\} (\\d+)`).exec(metrics)?.[1]);
  }

  // The slot being copied is held until it is saved (src/scheduler/prefix-copies.ts): the session
  // given the leader's slot as the leader ends is sent once the followers' save is done.
  it("the leader's slot handed to a waiting session as the leader ends: its followers still copy the start, and that session goes on", async () => {
    // The leader answers at length, so that its followers take the other slots and a session of
    // another agent waits for one before it ends; the waiting session is then given its slot.
    const leading = turn("eta", "lead", [{ role: "user", content: "Refactor the parser." }], { max_tokens: 300, ...NO_EARLY_STOP });
    await until(async () => (await gauge("requests_in_flight")) === 1, "the leader on its slot");
    const following = ["Add a test for the lexer.", "Explain the build script."].map((task, i) => turn("eta", `follow-${i}`, [{ role: "user", content: task }]));
    await until(async () => (await gauge("requests_in_flight")) === SLOTS, "its followers on the other slots");
    const waiting = turn("theta", "next", [{ role: "user", content: "Write the changelog." }]);
    await until(async () => (await gauge("queue_depth")) === 1, "a session waiting for a slot");
    const [lead, ...followers] = await Promise.all([leading, ...following]);
    const next = await waiting;
    expect(lead!.predicted_n).toBe(300);
    expect(lead!.prompt_n).toBeGreaterThan(4000);
    for (const follower of followers) {
      expect(follower.cache_n, JSON.stringify(followers)).toBeGreaterThan(4000);
      expect(follower.prompt_n, JSON.stringify(followers)).toBeLessThan(60);
    }
    // Its own start, which no slot held.
    expect(next.prompt_n).toBeGreaterThan(4000);
  });

  // Regression: a leader whose client leaves is cancelled by llama-server only once it sees the
  // connection closed, so the saves of its slot that follow find it busy and are deferred, and
  // llama-server takes back one deferred task per slot it frees. The parking of that slot for the
  // session given it went first, that session's request was sent and ran there, and the
  // followers' save, deferred behind it, copied its conversation instead of the start: a follower
  // processed the start again (not on every run: it depends on which save reached llama-server first).
  it("a leader whose client leaves while it answers: its followers copy its slot once llama-server lets it go, and the session given that slot goes on", async () => {
    const body = { model: "ai/agent", messages: [{ role: "system", content: system("iota") }, { role: "user", content: "Refactor the parser." }], tools: TOOLS, user: "left", temperature: 0, max_tokens: 4000, ...NO_EARLY_STOP, stream: true };
    const leader = openStream({ url: stack.url }, "/v1/chat/completions", body, 2);
    await leader.started;
    const following = ["Add a test for the lexer.", "Explain the build script."].map((task, i) => turn("iota", `left-${i}`, [{ role: "user", content: task }]));
    await until(async () => (await gauge("requests_in_flight")) === SLOTS, "its followers on the other slots");
    const waiting = turn("kappa", "after-left", [{ role: "user", content: "Write the changelog." }]);
    await until(async () => (await gauge("queue_depth")) === 1, "a session waiting for a slot");
    expect(leader.text(), "the leader answering still").not.toContain("[DONE]");
    leader.hangUp();
    const followers = await Promise.all(following);
    for (const follower of followers) {
      expect(follower.cache_n, JSON.stringify(followers)).toBeGreaterThan(4000);
      expect(follower.prompt_n, JSON.stringify(followers)).toBeLessThan(60);
    }
    expect((await waiting).prompt_n).toBeGreaterThan(4000);
  });
});

/** One turn of a client that names no session (a script, LangChain): the agent's start, its messages so far. */
async function anonymous(agent: string, messages: Message[], reply: object = { max_tokens: 2 }): Promise<Timings> {
  const body = { model: "ai/agent", messages: [{ role: "system", content: system(agent) }, ...messages], tools: TOOLS, temperature: 0, ...reply };
  const answer = await ask({ url: stack.url }, "POST", "/v1/chat/completions", body);
  expect(answer.status, answer.body).toBe(200);
  return answer.json().timings as Timings;
}

/** Prompt tokens the runners have processed so far, as llama-server counts them (its /metrics), asked on their own sockets. */
async function processedTokens(): Promise<number> {
  const run = join(stack.dir, "run");
  const sockets = (await readdir(run)).filter((name) => name.endsWith(".sock"));
  const counts = await Promise.all(sockets.map(async (socket) => Number(/llamacpp:prompt_tokens_total (\d+)/.exec((await ask({ socketPath: join(run, socket) }, "GET", "/metrics")).body)?.[1] ?? 0)));
  return counts.reduce((a, b) => a + b, 0);
}

describe("clients that name no session", () => {
  it("opening together over one start process it once between them, and each later turn only its new tokens", async () => {
    const tasks = ["Fix the bug in lexer.ts.", "Add a test for the CLI.", "Explain the build script."];
    const before = await processedTokens();
    const opened = await Promise.all(tasks.map((task) => anonymous("lambda", [{ role: "user", content: task }])));
    const size = Math.max(...opened.map((t) => t.prompt_n + t.cache_n));
    expect(size).toBeGreaterThan(4000);
    const first = (await processedTokens()) - before;
    // The start once, then each client's own task (llama-server alone processes the start once per client).
    expect(first, JSON.stringify(opened)).toBeLessThan(1.1 * size);
    const again = await Promise.all(tasks.map((task) => anonymous("lambda", [{ role: "user", content: task }, { role: "assistant", content: "On it." }, { role: "user", content: "Go on." }])));
    for (const turn of again) expect(turn.prompt_n, JSON.stringify(again)).toBeLessThan(60);
  });

  it("sessions keep their conversations while decisions and requests naming no session run on every slot between their turns", async () => {
    const sessions = Array.from({ length: SLOTS }, (_, i) => `kept-${i}`);
    await Promise.all(sessions.map((session) => turn("mu", session, [{ role: "user", content: history(session) }])));
    // Between their turns: as many clients naming no session, over a start of their own, and a
    // decision asking more questions than there are slots, at once.
    const decision = ask({ url: stack.url }, "POST", "/v1/decisions", {
      model: "ai/agent",
      input: `A report to judge. ${"It says many things about the build. ".repeat(30)}`,
      questions: Array.from({ length: 2 * SLOTS }, (_, i) => ({ type: "predicate", name: `q${i}`, instructions: `Claim ${i} holds.` })),
    });
    const others = Array.from({ length: SLOTS }, (_, i) => anonymous("nu", [{ role: "user", content: `Task ${i}.` }]));
    const [decided] = await Promise.all([decision, ...others]);
    expect(decided.status, decided.body).toBe(200);
    const next = await Promise.all(sessions.map((session) => turn("mu", session, second(session))));
    for (const t of next) expect(t.prompt_n, JSON.stringify(next)).toBeLessThan(60);
  }, 180_000);
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
    for (let i = 0; i < SLOTS + count; i++) first.push(await turn(agent, `${tag}-${i}`, [{ role: "user", content: history(`${tag}-${i}`) }], undefined, headers));
    expect((await parked()).length - before, "entries parked by the first turns").toBe(count);
    return first[0]!;
  }
  /**
   * Processed only its new tokens: its whole conversation (the first turn's prompt) came from its
   * restored slot. (A first turn that led, its prompt processed by our prefill, leaves the last of
   * its prompt's tokens to be processed again: llama-server evaluates at least one token of a
   * request, and its answer there found one token fewer in the slot afterwards.)
   */
  const onlyNew = (t: Timings, first: Pick<Timings, "prompt_n" | "cache_n">) => {
    expect(t.prompt_n, JSON.stringify(t)).toBeLessThan(60);
    expect(t.cache_n).toBeGreaterThanOrEqual(first.prompt_n + first.cache_n - 1);
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
    const first = await parkFirst("eta", "keyed", alice, 2);
    // Bob names a parked session of alice's and sends her conversation: he processes it, as a new session would.
    const own = history("keyed-0").length / 2; // about one token per byte: well below its tokens
    const guessed = await turn("eta", "keyed-1", second("keyed-1"), undefined, bob);
    expect(guessed.prompt_n, JSON.stringify(guessed)).toBeGreaterThan(own);
    // His "keyed-1", in a slot as the server stops, is parked as his own: after the restart he names her other one.
    await stack.restart({ API_KEYS_FILE: keys });
    const entries = (await parked()).length;
    const after = await turn("eta", "keyed-0", second("keyed-0"), undefined, bob);
    expect(after.prompt_n, JSON.stringify(after)).toBeGreaterThan(own);
    expect(await parked(), "alice's entry is still there").toHaveLength(entries);
    // Alice's own session gets it back.
    onlyNew(await turn("eta", "keyed-0", second("keyed-0"), undefined, alice), first);
    expect(await parked()).toHaveLength(entries - 1);
  });

  it("sessions holding their slots as llamadock stops, or as their runner is unloaded, are parked: each comes back to only its new tokens, never for another key naming it", async () => {
    const keys = join(stack.dir, "held-keys");
    await writeFile(keys, "sk-carol-held-61 name=carol admin\nsk-dave-held-67 name=dave\n");
    await stack.restart({ API_KEYS_FILE: keys });
    const carol = { authorization: "Bearer sk-carol-held-61" };
    const dave = { authorization: "Bearer sk-dave-held-67" };
    // One session per slot: none is displaced, so none is parked while the runner serves.
    const before = (await parked()).length;
    const first: Timings[] = [];
    for (let i = 0; i < SLOTS; i++) first.push(await turn("lambda", `held-${i}`, [{ role: "user", content: history(`held-${i}`) }], undefined, carol));
    expect(await parked(), "none parked while each has its slot").toHaveLength(before);
    await stack.restart({ API_KEYS_FILE: keys });
    expect(await parked(), "each slot's session parked as the server stopped").toHaveLength(before + SLOTS);
    // Placed anew, each comes back to another slot than the one it held (held-2 to slot 0, held-1
    // to the one left empty): a slot restored by its number would hold another's conversation.
    const last = await turn("lambda", "held-2", second("held-2"), undefined, carol);
    onlyNew(last, first[2]!);
    expect(await parked(), "the restored entry leaves the folder").toHaveLength(before + SLOTS - 1);
    // Dave names another of carol's sessions and sends her conversation: he processes it, her entry stays.
    const own = history("held-0").length / 2; // about one token per byte: well below its tokens
    const guessed = await turn("lambda", "held-0", second("held-0"), undefined, dave);
    expect(guessed.prompt_n, JSON.stringify(guessed)).toBeGreaterThan(own);
    expect(await parked(), "carol's entries are still there").toHaveLength(before + SLOTS - 1);
    const again = await turn("lambda", "held-1", second("held-1"), undefined, carol);
    onlyNew(again, first[1]!);
    // Its runner unloaded while it holds slot 2, then loaded for its next turn (placed in slot 0).
    expect((await ask({ url: stack.url }, "POST", "/engines/unload", { all: true }, carol)).status).toBe(200);
    const third = [...second("held-1"), { role: "assistant", content: "They pass." }, { role: "user", content: "Commit it." }];
    onlyNew(await turn("lambda", "held-1", third, undefined, carol), { prompt_n: again.prompt_n + again.cache_n, cache_n: 0 });
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

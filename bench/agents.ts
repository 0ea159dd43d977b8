import { detectRuntime } from "../src/runtime/index.ts";
import { startStack } from "../test/inference/harness.ts";
import { wideChatModel } from "../test/support/wide-model.ts";
import { ourRunnerFetch, startDirectRunner } from "./direct-runner.ts";

// Coding agents sharing one runner, in time as well as tokens: K sessions of one agent shape open
// together over one long start (a system prompt and 12 tools, as sessions of one agent in one
// folder send), then take T turns each, every turn a task and the model's streamed answer of A
// tokens, the next turn sending that history back. Each shape as its agent speaks it:
//   chat      OpenAI chat completions, the session as `prompt_cache_key` (opencode, scripts);
//   messages  Anthropic Messages, system blocks, Anthropic tools, `x-claude-code-session-id` (Claude Code);
//   responses OpenAI Responses, `instructions`, input items, the `session-id` header (Codex).
// Through our server, and straight to a llama-server started with the very flags of our runner
// (its own Messages and Responses endpoints), sides alternating, one shape at a time, in one run.
// For each side and round: the prompt tokens its runner processed (llama-server's own count, its
// /metrics `prompt_tokens_total`, before and after) against the ideal (the start once and each
// session's own tokens in the opening round; in later rounds, what each turn adds to the previous
// prompt), and the round's time; then the whole run's time, ours over llama-server's, beside the
// runner's own seconds spent processing prompts and generating (its /metrics, summed over slots):
// the prompts' time is what keeping sessions on their slots can save, the answers' is not.
//
//   npm run bench:agents      BENCH_MODEL: wide (default: random weights BENCH_WIDTH (128) wide, 4 layers,
//                             a 65k context, so that an 8k-token start takes seconds on two cores) or tiny;
//                             BENCH_SHAPES (chat,messages,responses), BENCH_SESSIONS (6),
//                             BENCH_SLOTS (4, the default), BENCH_TURNS (3), BENCH_ANSWER (200 tokens),
//                             BENCH_PREFIX_CHARS (10500: about 8k tokens)

const SHAPES = (process.env.BENCH_SHAPES ?? "chat,messages,responses").split(",") as Shape[];
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 6);
const SLOTS = Number(process.env.BENCH_SLOTS ?? 4);
const TURNS = Number(process.env.BENCH_TURNS ?? 3);
const ANSWER = Number(process.env.BENCH_ANSWER ?? 200);
const PREFIX_CHARS = Number(process.env.BENCH_PREFIX_CHARS ?? 10500);
const WIDE = (process.env.BENCH_MODEL ?? "wide") === "wide";
const MODEL = "ai/agent";
const WIDTH = Number(process.env.BENCH_WIDTH ?? 128);
const SHAPE = WIDE ? wideChatModel({ width: WIDTH, layers: 4, context: 65_536 }) : { vocabulary: "bpe" as const, seed: 1, context: 65_536 };

type Shape = "chat" | "messages" | "responses";
type Message = { role: "user" | "assistant"; content: string };
type Start = { system: string; tools: { name: string; description: string; parameters: object }[] };
/** A turn as the side reported it: the prompt's size and what it generated (the ideal is counted from these). */
type Turn = { size: number; generated: number };

const runtime = await detectRuntime();
const stack = await startStack({ models: [], shaped: { [MODEL]: SHAPE }, env: { INFERENCE_SLOTS: String(SLOTS), INFERENCE_THREADS: "2", INFERENCE_MAX_TOKENS: "100000" } });
// Over TCP, as agents connect.
const viaUs = ((input: string, init: RequestInit) => fetch(new URL(new URL(input).pathname, stack.url), { ...init, timeout: false } as RequestInit)) as typeof fetch;

/** The start every session of one run shares (`salt` keeps one run's start from another's caches). */
function start(salt: string): Start {
  const tools = Array.from({ length: 12 }, (_, i) => ({
    name: `tool_${i}`,
    description: `Tool ${i}: ${"does one thing to the files of the repository. ".repeat(4)}`,
    parameters: { type: "object", properties: { path: { type: "string" }, text: { type: "string" } } },
  }));
  let system = `[${salt}] You are a coding agent working in the user's repository.\n`;
  for (let i = 0; system.length + JSON.stringify(tools).length < PREFIX_CHARS; i++) system += `${i}. Before you edit a file, read it whole; keep changes small and run the tests after each one.\n`;
  return { system, tools };
}

/** The request of one turn, as the shape's agent sends it: path, headers, body. */
function request(shape: Shape, session: string, begin: Start, history: Message[]): { path: string; headers: Record<string, string>; body: object } {
  const common = { model: MODEL, stream: true, temperature: 0, ignore_eos: true };
  if (shape === "chat") {
    const tools = begin.tools.map((t) => ({ type: "function", function: t }));
    return { path: "/v1/chat/completions", headers: {}, body: { ...common, max_tokens: ANSWER, prompt_cache_key: session, messages: [{ role: "system", content: begin.system }, ...history], tools } };
  }
  if (shape === "messages") {
    const tools = begin.tools.map(({ name, description, parameters }) => ({ name, description, input_schema: parameters }));
    const system = [{ type: "text", text: "x-anthropic-billing-header: cc_version=2.1; cc_entrypoint=sdk-cli;" }, { type: "text", text: begin.system }];
    return { path: "/v1/messages", headers: { "x-claude-code-session-id": session }, body: { ...common, max_tokens: ANSWER, system, tools, messages: history, metadata: { user_id: `user_${session}` } } };
  }
  const tools = begin.tools.map((t) => ({ type: "function", ...t }));
  const input = history.map((m) => ({ type: "message", role: m.role, content: [{ type: m.role === "user" ? "input_text" : "output_text", text: m.content }] }));
  return { path: "/v1/responses", headers: { "session-id": session }, body: { ...common, max_output_tokens: ANSWER, store: false, instructions: begin.system, tools, input, prompt_cache_key: session } };
}

/** One streamed turn: the answer's text, and the prompt's size and tokens generated where the stream says them. */
async function turn(fetchVia: typeof fetch, shape: Shape, session: string, begin: Start, history: Message[]): Promise<{ turn: Turn | undefined; answer: string }> {
  const { path, headers, body } = request(shape, session, begin, history);
  const response = await fetchVia(`http://localhost${path}`, { method: "POST", headers: { "content-type": "application/json", connection: "close", ...headers }, body: JSON.stringify(body) });
  if (!response.ok || !response.body) throw new Error(`${shape}: status ${response.status}: ${await response.text()}`);
  const text = await response.text();
  const last = (name: string) => [...text.matchAll(new RegExp(`"${name}":(\\d+)`, "g"))].map((m) => Number(m[1])).at(-1);
  const pieces = (field: string) => [...text.matchAll(new RegExp(`"${field}":"((?:[^"\\\\]|\\\\.)*)"`, "g"))].map((m) => JSON.parse(`"${m[1]}"`) as string).join("");
  const answer = shape === "chat" ? pieces("content") : shape === "messages" ? pieces("text") : pieces("delta");
  // Each dialect's own count of the prompt: chat's timings, Anthropic's split, Responses' usage.
  const size = shape === "chat" ? (last("prompt_n") ?? NaN) + (last("cache_n") ?? NaN) : shape === "messages" ? (last("input_tokens") ?? NaN) + (last("cache_read_input_tokens") ?? 0) : (last("input_tokens") ?? NaN);
  const generated = last(shape === "chat" ? "predicted_n" : "output_tokens") ?? NaN;
  return { turn: Number.isFinite(size) ? { size, generated } : undefined, answer };
}

/** A runner's counters so far (llama-server's /metrics): prompt tokens processed, and seconds spent on prompts and on generating, summed over its slots. */
type Counters = { processed: number; promptS: number; generated: number; generateS: number };
type Side = { name: string; fetchVia: typeof fetch; counters(): Promise<Counters> };
type Round = Counters & { ms: number; turns: (Turn | undefined)[] };

async function countersOf(fetchVia: typeof fetch): Promise<Counters> {
  const text = await (await fetchVia("http://localhost/metrics")).text();
  const read = (name: string) => Number(new RegExp(`llamacpp:${name} ([\\d.e+]+)`).exec(text)?.[1] ?? NaN);
  return { processed: read("prompt_tokens_total"), promptS: read("prompt_seconds_total"), generated: read("tokens_predicted_total"), generateS: read("tokens_predicted_seconds_total") };
}

const since = (now: Counters, before: Counters): Counters => ({ processed: now.processed - before.processed, promptS: now.promptS - before.promptS, generated: now.generated - before.generated, generateS: now.generateS - before.generateS });

/** K sessions at once, T rounds: each session its own task text, growing its own history. */
async function run(side: Side, shape: Shape, salt: string): Promise<Round[]> {
  const begin = start(salt);
  const histories: Message[][] = Array.from({ length: SESSIONS }, () => []);
  const rounds: Round[] = [];
  for (let t = 0; t < TURNS; t++) {
    const before = await side.counters();
    const began = performance.now();
    const turns = await Promise.all(
      histories.map(async (history, s) => {
        history.push({ role: "user", content: `Session ${s}, task ${t}: ${"change the parser so that it accepts one more case, then test it. ".repeat(3)}` });
        const done = await turn(side.fetchVia, shape, `${salt}-${s}`, begin, history);
        history.push({ role: "assistant", content: done.answer });
        return done.turn;
      }),
    );
    const ms = performance.now() - began;
    rounds.push({ ...since(await side.counters(), before), ms, turns });
  }
  return rounds;
}

/** The shared start's tokens: the common prefix of two sessions' first prompts, as llama-server tokenizes them (chat's template). */
async function sharedTokens(fetchVia: typeof fetch, begin: Start): Promise<number> {
  const tokens = async (task: string) => {
    const messages = [{ role: "system", content: begin.system }, { role: "user", content: task }];
    const tools = begin.tools.map((t) => ({ type: "function", function: t }));
    const { prompt } = (await (await fetchVia("http://localhost/apply-template", { method: "POST", body: JSON.stringify({ messages, tools }) })).json()) as { prompt: string };
    return ((await (await fetchVia("http://localhost/tokenize", { method: "POST", body: JSON.stringify({ content: prompt }) })).json()) as { tokens: number[] }).tokens;
  };
  const [a, b] = await Promise.all([tokens("Session 0"), tokens("Session 1")]);
  let n = 0;
  while (n < a.length && a[n] === b[n]) n++;
  return n;
}

/**
 * The ideal of each round, from the sizes our side reported (each dialect's exact count): the
 * opening round, the start once and each session's own tokens; a later round, what each turn adds
 * to the previous prompt: the answer sent back and the next task. (The slot holds the answer as
 * generated, but a random-weight model's text does not tokenize back to the tokens it generated:
 * the answer is processed again from where they part, most of it.)
 */
function ideals(rounds: Round[], shared: number): number[] {
  return rounds.map((round, t) =>
    round.turns.reduce((sum, now, s) => {
      if (!now) return NaN;
      if (t === 0) return sum + now.size - shared;
      const before = rounds[t - 1]!.turns[s]!;
      return sum + now.size - before.size;
    }, t === 0 ? shared : 0),
  );
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

try {
  // Loads our runner (its flags are what the direct one is started with).
  await turn(viaUs, "chat", "warm", start("warm"), [{ role: "user", content: "hi" }]);
  const direct = await startDirectRunner(stack, runtime);
  const ourRunner = ourRunnerFetch(stack, runtime);
  const sides: Side[] = [
    { name: "llama-server", fetchVia: direct.fetchVia, counters: () => countersOf(direct.fetchVia) },
    { name: "llamadock", fetchVia: viaUs, counters: () => countersOf(ourRunner) },
  ];
  const lines: string[] = [];
  try {
    const shared = await sharedTokens(direct.fetchVia, start("k"));
    const load = (await import("node:os")).loadavg().map((l) => l.toFixed(1)).join(" ");
    console.log(`model: ${WIDE ? `wide (${WIDTH} wide, 4 layers, 65k context)` : "tiny (64 wide, 2 layers)"}; ${SLOTS} slots; ${SESSIONS} sessions of each shape; shared start ${shared} tokens; ${TURNS} turns of ${ANSWER} streamed tokens; load ${load}`);
    for (const [i, shape] of SHAPES.entries()) {
      const results: Record<string, Round[]> = {};
      // Alternating which side goes first; each side its own salt, so that neither finds the other's start.
      for (const side of i % 2 === 0 ? sides : [...sides].reverse()) results[side.name] = await run(side, shape, `${shape}-${side.name}-${Date.now()}`);
      const ideal = ideals(results.llamadock!, shared);
      for (const [name, rounds] of Object.entries(results)) {
        const perRound = rounds.map((r, t) => `${(r.processed / ideal[t]!).toFixed(2)}x in ${seconds(r.ms)}`).join(", ");
        const sum = (field: keyof Counters) => rounds.reduce((s, r) => s + r[field], 0);
        const runner = `runner: prompts ${sum("promptS").toFixed(1)} s, ${sum("generated")} tokens generated in ${sum("generateS").toFixed(1)} s (slot-seconds)`;
        console.log(`${shape.padEnd(9)} ${name.padEnd(12)} rounds (prompt tokens processed / ideal, time): ${perRound}; total ${seconds(rounds.reduce((s, r) => s + r.ms, 0))}; ${runner}`);
      }
      const [ours, theirs] = [results.llamadock!, results["llama-server"]!];
      const total = (rounds: Round[]) => rounds.reduce((s, r) => s + r.ms, 0);
      const prompts = (rounds: Round[]) => rounds.reduce((s, r) => s + r.promptS, 0);
      const later = (rounds: Round[]) => rounds.slice(1).reduce((s, r) => s + r.processed, 0) / ideal.slice(1).reduce((a, b) => a + b, 0);
      lines.push(
        `${shape}: start processed ${(ours[0]!.processed / ideal[0]!).toFixed(2)}x the ideal (llama-server ${(theirs[0]!.processed / ideal[0]!).toFixed(2)}x); ` +
          `later turns ${later(ours).toFixed(2)}x their new tokens (llama-server ${later(theirs).toFixed(2)}x); time ours/llama-server ${(total(ours) / total(theirs)).toFixed(2)} (the runner's prompt seconds ${(prompts(ours) / prompts(theirs)).toFixed(2)})`,
      );
    }
  } finally {
    await direct.stop();
  }
  for (const line of lines) console.log(line);
} catch (error) {
  console.error(stack.server.output().slice(-3000));
  console.error((await stack.runnerLogs()).slice(-3000));
  throw error;
} finally {
  await stack.stop();
}

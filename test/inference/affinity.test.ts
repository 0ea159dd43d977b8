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
async function turn(agent: string, session: string, messages: Message[]): Promise<Timings> {
  const body = { model: "ai/agent", messages: [{ role: "system", content: system(agent) }, ...messages], tools: TOOLS, user: session, max_tokens: 2, temperature: 0 };
  const answer = await ask({ url: stack.url }, "POST", "/v1/chat/completions", body);
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

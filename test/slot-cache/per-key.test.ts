import { describe, expect, it } from "vitest";
import { KEY_HEADER, promptHolders, withPromptsPerKey } from "../../src/slot-cache/per-key.ts";
import type { RunnerProcess, RunnerSpec } from "../../src/scheduler/types.ts";

// Which requests may reuse a runner's caches when prompts are kept per key: a stand-in runner
// records what it was sent (the real llama-server's answers are in keys-apart.test.ts).

const spec: RunnerSpec = { name: "m-completion-1", alias: "ai/m:latest", modelPath: "/store/blobs/sha256/abc", mode: "completion", parallel: 2, contextSize: 4096 };

function recordingRunner() {
  const sent: { headers: Headers; body: Record<string, unknown> }[] = [];
  const process: RunnerProcess = {
    fetch: (async (_url: string, init: RequestInit = {}) => {
      sent.push({ headers: new Headers(init.headers), body: JSON.parse(new TextDecoder().decode(init.body as Uint8Array)) as Record<string, unknown> });
      return Response.json({});
    }) as typeof fetch,
    exited: new Promise(() => {}),
    running: () => true,
    stop: async () => {},
    kill: async () => {},
  };
  return { process, sent };
}

const body = (prompt: string) => new TextEncoder().encode(JSON.stringify({ prompt, max_tokens: 2 }));
const send = (runner: RunnerProcess, key: string | undefined) =>
  runner.fetch("http://runner/v1/completions", { method: "POST", headers: { "content-type": "application/json", ...(key ? { [KEY_HEADER]: key } : {}) }, body: body("hi") });

describe("prompts per key", () => {
  it.each([
    ["one key alone reuses its caches", [[], ["alice", "alice", "alice"]], [true, true, true]],
    ["a second key reuses nothing, and from then on neither does the first", [[], ["alice", "bob", "alice", "bob"]], [true, false, false, false]],
    ["a runner that restored someone's slot reuses nothing for anyone", [["(unknown)"], ["alice", "alice"]], [false, false]],
    ["a runner that restored the key's own slot reuses it", [["alice"], ["alice", "bob"]], [true, false]],
  ] as const)("%s", async (_name, [restored, keys], reused) => {
    const runner = recordingRunner();
    for (const name of restored) promptHolders(runner.process).add(name);
    const wrapped = await withPromptsPerKey(async () => runner.process)(spec);
    for (const key of keys) await send(wrapped, key);
    expect(runner.sent.map((s) => s.body.cache_prompt !== false)).toEqual(reused);
    // The key's name never reaches llama-server; the rest of the body goes as it came.
    for (const { headers, body } of runner.sent) {
      expect(headers.get(KEY_HEADER)).toBeNull();
      expect(body).toMatchObject({ prompt: "hi", max_tokens: 2 });
    }
    expect([...promptHolders(runner.process)].sort()).toEqual([...new Set([...restored, ...keys])].sort());
  });

  it("a request without a key's name (our own: slot saves, health) passes as it is", async () => {
    const runner = recordingRunner();
    const wrapped = await withPromptsPerKey(async () => runner.process)(spec);
    await send(wrapped, "alice");
    await send(wrapped, undefined);
    await send(wrapped, "alice");
    expect(runner.sent.map((s) => s.body.cache_prompt)).toEqual([undefined, undefined, undefined]);
  });
});


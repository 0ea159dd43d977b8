import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask, type Target } from "../support/http.ts";
import { startServer, type ServerProcess } from "../support/server-process.ts";

// The usage ledger cannot be grown by what a client sends: `src/index.ts` under Node, with keys,
// asked for hundreds of distinct model names that do not exist (0.5 to 4 KB), in each dialect that counts refusals. Each
// is refused (404, or 400 when too long to be a reference) and counted for its key under one row, "(unknown)", never under the name sent:
// usage.json, /engines/usage and /metrics stay as small as for one name. (Before, 300 such names
// grew usage.json by 1.2 MB, and each name was a row and a /metrics line.)

const KEYS = { alice: "sk-alice-bounds-1f", bob: "sk-bob-bounds-2e" };
const NAMES = 300;
const as = (key: string) => ({ authorization: `Bearer ${key}` });
/** A distinct model name that no store holds: half of them a valid reference of 500 bytes, half 4 KB (refused 400, too long to be one). */
const bogus = (i: number) => `ai/no-such-${i}-${"x".repeat(i % 2 ? 480 : 4000)}`;

let dir: string;
let server: ServerProcess;
let target: Target;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-usage-bounds-"));
  // bob may make one request a minute: the 404s come before admission, and still count once each.
  await writeFile(join(dir, "keys"), `${KEYS.alice} name=alice admin\n${KEYS.bob} name=bob rpm=1\n`);
  server = await startServer({
    runtime: "node",
    env: {
      SERVICES: "runner",
      RUNNER_PORT: "0",
      RUNNER_SOCKET: "none",
      MODELS_PATH: join(dir, "models"),
      INFERENCE_SETTINGS_PATH: join(dir, "settings.json"),
      INFERENCE_RUNTIME_DIR: join(dir, "run"),
      API_KEYS_FILE: join(dir, "keys"),
    },
    ready: [/model runner service listening on http:\/\/[\d.]+:\d+/],
  });
  target = { url: /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]! };
}, 60_000);
afterAll(async () => {
  await server?.stop(5_000);
  await rm(dir, { recursive: true, force: true });
});

const DIALECTS = [
  ["/v1/chat/completions", (model: string) => ({ model, messages: [{ role: "user", content: "hi" }] })],
  ["/v1/completions", (model: string) => ({ model, prompt: "hi" })],
  ["/v1/messages", (model: string) => ({ model, max_tokens: 4, messages: [{ role: "user", content: "hi" }] })],
] as const;

describe("requests for models that do not exist", () => {
  it("are counted under one row per key, whatever names they send", async () => {
    for (const [key, secret] of Object.entries(KEYS)) {
      for (let i = 0; i < NAMES; i += 20) {
        const answers = await Promise.all(
          Array.from({ length: 20 }, (_, j) => {
            const [path, body] = DIALECTS[(i + j) % DIALECTS.length]!;
            return ask(target, "POST", path, body(bogus(i + j)), as(secret));
          }),
        );
        answers.forEach((answer, j) => expect(answer.status, `${key}: ${answer.body.slice(0, 200)}`).toBe((i + j) % 2 ? 404 : 400));
      }
    }

    const usage = await ask(target, "GET", "/engines/usage?by=key,model", undefined, as(KEYS.alice));
    expect(usage.json().data).toEqual([
      { key: "alice", model: "(unknown)", requests: NAMES, prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, errors: NAMES },
      { key: "bob", model: "(unknown)", requests: NAMES, prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, errors: NAMES },
    ]);
    expect(usage.body.length).toBeLessThan(1024);

    const metrics = (await ask(target, "GET", "/metrics", undefined, as(KEYS.alice))).body;
    const usageLines = metrics.split("\n").filter((line) => line.startsWith("llamadock_key_"));
    expect(metrics).not.toContain("no-such");
    expect(usageLines).toContain('llamadock_key_requests_total{key="bob",model="(unknown)"} 300');
    expect(usageLines.join("\n").length).toBeLessThan(2048);
    expect(metrics).toContain('llamadock_usage_rows_dropped_total{reason="rows"} 0');

    // Written at stop at the latest (SIGTERM flushes it).
    await server.stop(10_000);
    const path = join(dir, "usage.json");
    const text = await readFile(path, "utf8");
    expect(text).not.toContain("no-such");
    expect(JSON.parse(text).rows).toHaveLength(2);
    expect((await stat(path)).size).toBeLessThan(1024);
  }, 120_000);
});

import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { pushModel, startRegistry, type Registry } from "../support/registry.ts";
import { startReplica, type Replica } from "../support/replica.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// Two replicas of a pool on one store (support/replica.ts: real server processes, Node and Bun,
// one MODELS_PATH and so one slot-cache folder), each pinning the tiny chat model (a BPE vocabulary
// of about one token per byte) from a real registry, loaded before any session comes. One is
// stopped with SIGTERM: it parks the sessions in its slots; their next turns go to the other,
// which restores them. What shows where a prompt was processed is llama-server's own count of the
// tokens it processed and took from its cache (`timings.prompt_n`, `cache_n`).

const SLOTS = 2;
let registry: Registry;
let dir: string;
let a: Replica;
let b: Replica;

beforeAll(async () => {
  registry = await startRegistry();
  await pushModel(registry, "ai/agent", "latest", tinyLlamaGguf({ vocabulary: "bpe", seed: 1, context: 16384 }));
  dir = await mkdtemp(join(tmpdir(), "llamadock-replicas-"));
  const env = { PINNED_MODELS: "ai/agent", INFERENCE_SLOTS: String(SLOTS) };
  [a, b] = await Promise.all([startReplica(dir, "a", "node", registry.host, env), startReplica(dir, "b", "bun", registry.host, env)]);
  // Both runners loaded (their model pinned) before the first session: what B's knows of the folder then holds nothing parked.
  for (const replica of [a, b]) await until(async () => (await ask(replica, "GET", "/readyz").catch(() => undefined))?.status === 200, "a replica ready", 4800);
}, 240_000);
afterAll(async () => {
  await Promise.all([a?.server.stop(), b?.server.stop()]);
  await registry?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

type Timings = { prompt_n: number; cache_n: number };
/** Each session's own long history (a file it read): what it would process again where its conversation is not. */
const history = (session: string) => `Fix the failing test in ${session}.ts, please. It reads:\n${Array.from({ length: 30 }, (_, i) => `export const ${session}${i} = parse(input${i});`).join("\n")}`;
const first = (session: string) => [{ role: "user", content: history(session) }];
const second = (session: string) => [...first(session), { role: "assistant", content: "I read it." }, { role: "user", content: "Now run the tests." }];

/** One turn of a session, named as Claude Code names it (its header). */
async function turn(replica: Replica, session: string, messages: object[]): Promise<Timings> {
  const body = { model: "ai/agent", messages, max_tokens: 2, temperature: 0 };
  const answer = await ask(replica, "POST", "/v1/chat/completions", body, { "x-claude-code-session-id": session });
  expect(answer.status, answer.body).toBe(200);
  return answer.json().timings as Timings;
}

/** Processed only its new tokens: its whole conversation came from a restored slot. */
// A conversation restored from its file was seen to give one token of it back (as in test/inference/affinity.test.ts's restart).
const onlyNew = (t: Timings, before: Timings) => {
  expect(t.prompt_n, JSON.stringify(t)).toBeLessThan(60);
  expect(t.cache_n).toBeGreaterThanOrEqual(before.prompt_n + before.cache_n - 1);
};

/** Parked entries in the shared slot-cache folder. */
const parked = async () => (await readdir(join(dir, "models", "slot-cache")).catch(() => [] as string[])).filter((name) => /-p[0-9a-f]{32}\.json$/.test(name));

describe("replicas on one store", () => {
  it("the sessions of a replica stopped go on at another replica loaded before they were parked, each processing only its new tokens", async () => {
    const opened = { "s-0": await turn(a, "s-0", first("s-0")), "s-1": await turn(a, "s-1", first("s-1")), "s-2": await turn(b, "s-2", first("s-2")) };
    for (const t of Object.values(opened)) expect(t.prompt_n).toBeGreaterThan(history("s-0").length / 2);
    expect(await parked(), "each session in a slot: none parked").toEqual([]);
    // SIGTERM: A's runner parks the sessions in its slots as it stops.
    expect(await a.server.stop(30_000)).toBe(0);
    expect(await parked()).toHaveLength(2);
    onlyNew(await turn(b, "s-0", second("s-0")), opened["s-0"]);
    // B's two slots now hold s-2 and s-0: s-1 takes the one least recently used, parking s-2 there.
    onlyNew(await turn(b, "s-1", second("s-1")), opened["s-1"]);
    onlyNew(await turn(b, "s-2", second("s-2")), opened["s-2"]);
    // A's entries were restored and removed; s-2's was B's own, restored too, and s-0's parked in turn.
    expect(await parked()).toHaveLength(1);
  });
});

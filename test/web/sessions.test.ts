import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { routeTable } from "../../src/http/router.ts";
import { openLedger } from "../../src/inference/usage/ledger.ts";
import { createKeyring, type KeyEntry } from "../../src/keys/keyring.ts";
import type { RunnerSlots } from "../../src/scheduler/api.ts";
import { webRoutes } from "../../src/web/routes.ts";

// The live state's sessions view, asked of the page's routes with Request objects: an admin key
// sees every key's sessions, parked conversations and tokens; a plain key its own, other keys'
// slots as held and their parked sessions as a count. The keyring and the usage ledger are the
// server's own; the slot tables are what the scheduler would give.

const dir = mkdtempSync(join(tmpdir(), "llamadock-sessions-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const NOW = Date.parse("2026-03-04T12:00:00Z");
const ledger = openLedger(join(dir, "usage.json"), { maxRows: 100, keepDays: 30 }, () => NOW);
ledger.add("alice", "ai/agent:latest", { requests: 2, prompt_tokens: 5000, cached_tokens: 4200, completion_tokens: 40 });
ledger.add("bob", "ai/agent:latest", { requests: 1, prompt_tokens: 900, cached_tokens: 0, completion_tokens: 9 });
// An error only (a model not found): no prompt, nothing to show.
ledger.add("bob", "(unknown)", { requests: 1, errors: 1 });

const tables: RunnerSlots[] = [
  {
    model: "ai/agent:latest",
    mode: "completion",
    state: "ready",
    slots: [
      { busy: true, holder: { key: "alice", session: "3f2a9c1e-77b0-4c1a-9d2e-51f0a8c3b6d4" } },
      { busy: false, holder: { key: "bob", session: "bob-secret-session" } },
      { busy: false, holder: { key: "alice", opening: "9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e" } },
      { busy: false, holder: { start: true } },
      { busy: false },
    ],
    parked: [
      { key: "bob", session: "bob-parked-one" },
      { key: "alice", session: "alice-parked-session" },
    ],
  },
  // Embedding runners place no sessions: not shown.
  { model: "ai/embed:latest", mode: "embedding", state: "ready", slots: [{ busy: false }], parked: [] },
];

const KEYS: KeyEntry[] = [
  { key: "sk-admin-1", name: "alice", admin: true, limits: {} },
  { key: "sk-plain-2", name: "bob", admin: false, limits: {} },
];
const keyring = createKeyring(KEYS, { inFlight: 0, requestsPerMinute: 0, tokensPerMinute: 0 }, () => false);

const handler = routeTable(
  webRoutes({
    runners: () => [],
    models: async () => [],
    pulls: () => [],
    runDir: join(dir, "run"),
    slotTables: () => tables,
    usage: (filter) => ledger.rows(filter),
    now: () => NOW,
    identify: keyring.identify,
    notBrowser: () => new Response("Docker Model Runner is running"),
  }),
);

const asKey = (key: string, path = "/engines/state") => new Request(`http://localhost${path}`, { headers: { authorization: `Bearer ${key}` } });
const sessionsOf = async (key: string) => ((await (await handler(asKey(key))).json()) as { sessions: unknown }).sessions;

describe("the sessions view", () => {
  it("an admin key: every key's slots (session ids short, anonymous conversations as such), parked sessions and the day's tokens", async () => {
    expect(await sessionsOf("sk-admin-1")).toEqual({
      runners: [
        {
          model: "ai/agent:latest",
          state: "ready",
          slots: [
            { slot: 0, busy: true, holds: "session", key: "alice", id: "3f2a9c1e" },
            { slot: 1, busy: false, holds: "session", key: "bob", id: "bob-secr" },
            { slot: 2, busy: false, holds: "anonymous", key: "alice", id: "9b8c7d6e" },
            { slot: 3, busy: false, holds: "start" },
            { slot: 4, busy: false, holds: "nothing" },
          ],
          parked: [
            { key: "bob", id: "bob-park" },
            { key: "alice", id: "alice-pa" },
          ],
          parked_by_other_keys: 0,
        },
      ],
      tokens: {
        day: "2026-03-04",
        rows: [
          { key: "alice", model: "ai/agent:latest", requests: 2, prompt_tokens: 5000, processed_tokens: 800, cached_tokens: 4200 },
          { key: "bob", model: "ai/agent:latest", requests: 1, prompt_tokens: 900, processed_tokens: 900, cached_tokens: 0 },
        ],
      },
    });
  });

  it("a plain key: its own sessions and tokens; other keys' slots held, their parked sessions a count, their names and ids nowhere", async () => {
    const answer = await handler(asKey("sk-plain-2"));
    const text = await answer.text();
    expect(JSON.parse(text).sessions).toEqual({
      runners: [
        {
          model: "ai/agent:latest",
          state: "ready",
          slots: [
            { slot: 0, busy: true, holds: "other key" },
            { slot: 1, busy: false, holds: "session", key: "bob", id: "bob-secr" },
            { slot: 2, busy: false, holds: "other key" },
            { slot: 3, busy: false, holds: "start" },
            { slot: 4, busy: false, holds: "nothing" },
          ],
          parked: [{ key: "bob", id: "bob-park" }],
          parked_by_other_keys: 1,
        },
      ],
      tokens: { day: "2026-03-04", rows: [{ key: "bob", model: "ai/agent:latest", requests: 1, prompt_tokens: 900, processed_tokens: 900, cached_tokens: 0 }] },
    });
    for (const theirs of ["alice", "3f2a9c1e", "9b8c7d6e", "alice-pa"]) expect(text).not.toContain(theirs);
  });

  it("the events stream shows each caller the same view as the state", async () => {
    const response = await handler(asKey("sk-plain-2", "/engines/events"));
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!/event: state\ndata: .*\n\n/.test(text)) text += (await reader.read()).value ?? "";
    await reader.cancel();
    const state = JSON.parse(/event: state\ndata: (.*)\n/.exec(text)![1]!) as { sessions: unknown };
    expect(state.sessions).toEqual(await sessionsOf("sk-plain-2"));
    expect(text).not.toContain("alice");
  });
});

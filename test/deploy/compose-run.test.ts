import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { ask, type Answer } from "../support/http.ts";
import { BASE_IMAGE, buildImage, exec, hasCommand, inCi, podmanUsable, startRegistryContainer, type Podman, type RegistryContainer } from "../support/podman.ts";
import { freePort, pushModel } from "../support/registry.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// deploy/compose.yaml as a user starts it, with Debian's podman-compose (1.0.3, which knows no
// profiles: the services are named instead, as the file's comments do too). Only what this host
// lacks is changed, in an override file: the gateway's image (HAProxy from Debian, as no container
// registry can be reached) and the pool's pinned model, from a registry on the compose network.

const usable = podmanUsable() && hasCommand("podman-compose");
if (!usable && !inCi) console.warn("podman or podman-compose cannot run here: deploy/compose.yaml is NOT run (scripts/setup.sh --test installs podman and podman-compose; in CI this fails)");

const BUILD_TIMEOUT_MS = 60 * 60_000;
const GATEWAY_IMAGE = "localhost/llamadock-haproxy:bookworm";
const REPLICAS = ["llamadock-1", "llamadock-2"];

describe.skipIf(!usable && !inCi)("deploy/compose.yaml, run with podman-compose", () => {
  const project = `llamadock-compose-test-${process.pid}`;
  let podman: Podman;
  let dir: string;
  let registry: RegistryContainer;
  let model: string;
  let key: string;
  let defaultKey: string | undefined;
  let blobs: string[];
  let env: NodeJS.ProcessEnv;

  const compose = (args: string[], extra: NodeJS.ProcessEnv = {}) =>
    exec("podman-compose", ["-p", project, "-f", "deploy/compose.yaml", "-f", join(dir, "override.yaml"), ...args], { env: { ...env, ...extra }, timeoutMs: 300_000 });
  const container = (service: string) => `${project}_${service}_1`;

  beforeAll(async () => {
    podman = await buildImage(BUILD_TIMEOUT_MS);
    env = { ...podman.env, API_KEYS: undefined };
    dir = await mkdtemp(join(tmpdir(), "llamadock-compose-"));
    // HAProxy from Debian, started as the official image starts it (master-worker, in the foreground).
    await writeFile(join(dir, "Containerfile"), [
      `FROM ${BASE_IMAGE}`,
      "RUN apt-get update && apt-get install -y --no-install-recommends haproxy && rm -rf /var/lib/apt/lists/*",
      'CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]',
    ].join("\n"));
    await podman.run(["build", "--layers", "--tag", GATEWAY_IMAGE, dir], { timeoutMs: 600_000 });
    // The compose network, made first so that the registry is on it before the replicas pull.
    await podman.run(["network", "create", `${project}_default`]);
    registry = await startRegistryContainer(podman, `${project}-registry`, `${project}_default`, dir, "registry");
    // The tiny chat model (a BPE vocabulary of about one token per byte): agent sessions' turns fit its context.
    const pushed = await pushModel(registry, "test/tiny", "latest", tinyLlamaGguf({ vocabulary: "bpe", seed: 11, context: 16384 }));
    // What a pull keeps: the weights, and the artifact's config (so the model can be pushed as it came).
    blobs = [pushed.ggufDigest, pushed.configDigest].map((digest) => digest.replace("sha256:", "")).sort();
    model = `${registry.address}/test/tiny:latest`;
    const pinned = { PINNED_MODELS: model, REGISTRY_INSECURE: registry.address };
    await writeFile(join(dir, "override.yaml"), stringify({
      services: {
        ...Object.fromEntries(REPLICAS.map((name) => [name, { environment: pinned }])),
        gateway: { image: GATEWAY_IMAGE },
      },
    }));
  }, BUILD_TIMEOUT_MS + 600_000);

  afterAll(async () => {
    if (!podman) return;
    if (dir) await compose(["down", "--volumes"]).catch((error) => console.warn(String(error)));
    await registry?.stop();
    await podman.run(["network", "rm", "--force", `${project}_default`], { allowFailure: true });
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("the default service starts, with an API key generated into its volume", async () => {
    const port = await freePort();
    await compose(["up", "-d", "llamadock"], { LLAMADOCK_PORT: String(port), LLAMADOCK_ALBUM_PORT: String(await freePort()) });
    const target = { url: `http://127.0.0.1:${port}` };
    await until(async () => (await ask(target, "GET", "/livez").catch(() => undefined))?.status === 200, "the default service's /livez", 4800);
    const logs = await podman.run(["logs", container("llamadock")]);
    expect(logs.stderr + logs.stdout).toContain("generated one into /models/.api-keys");
    defaultKey = (await podman.run(["exec", container("llamadock"), "cat", "/models/.api-keys"])).stdout.trim();
    expect(defaultKey).toMatch(/^[0-9a-f]{48}$/);
    expect((await ask(target, "GET", "/models")).status).toBe(401);
    expect((await ask(target, "GET", "/models", undefined, { authorization: `Bearer ${defaultKey}` })).status).toBe(200);
    await compose(["stop", "llamadock"]);
  }, 300_000);

  describe("the pool: two replicas on one store behind HAProxy", () => {
    let target: { url: string };
    const chat = () => ask(target, "POST", "/engines/v1/chat/completions", { model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }, { authorization: `Bearer ${key}` });
    const servedBy = (answer: Answer) => answer.headers["x-llamadock-replica"];
    /** Sends chats one after another until each replica in `wanted` has answered one. */
    const untilServedBy = async (wanted: string[], what: string) => {
      const seen = new Set<string>();
      await until(async () => {
        const answer = await chat().catch(() => undefined);
        if (answer?.status === 200) seen.add(String(servedBy(answer)));
        return wanted.every((name) => seen.has(name));
      }, what, 2400);
    };

    beforeAll(async () => {
      const port = await freePort();
      target = { url: `http://127.0.0.1:${port}` };
      await compose(["up", "-d", "gateway"], { LLAMADOCK_PORT: String(port) });
      // The key of the shared volume: the default service's, or a replica's when it ran first.
      await until(async () => (key = (await podman.run(["exec", container(REPLICAS[0]!), "cat", "/models/.api-keys"], { allowFailure: true })).stdout.trim()) !== "", "the volume's API key");
      await untilServedBy(REPLICAS, "both replicas serving through the gateway");
    }, 600_000);

    it("share the default service's model volume (its generated key too), holding the pinned model once", async () => {
      for (const name of REPLICAS) {
        const { stdout } = await podman.run(["inspect", "--format", '{{range .Mounts}}{{if eq .Destination "/models"}}{{.Name}}{{end}}{{end}}', container(name)]);
        expect(stdout.trim()).toBe(`${project}_models`);
      }
      // Run alone (-t), the pool made the volume and its key itself.
      if (defaultKey) expect(key).toBe(defaultKey);
      // Both pinned and loaded the model; the store holds its blobs once (no partial file left).
      const stored = await podman.run(["exec", container(REPLICAS[1]!), "ls", "/models/blobs/sha256"]);
      expect(stored.stdout.trim().split("\n").sort()).toEqual(blobs);
    });

    it("spreads requests over both replicas", async () => {
      const answers = [];
      for (let i = 0; i < 10; i++) answers.push(await chat());
      expect(answers.map((a) => a.status)).toEqual(Array(10).fill(200));
      const counts = new Map<string, number>();
      for (const answer of answers) counts.set(String(servedBy(answer)), (counts.get(String(servedBy(answer))) ?? 0) + 1);
      expect([...counts.keys()].sort()).toEqual(REPLICAS);
    }, 120_000);

    describe("three agent sessions", () => {
      type Message = { role: string; content: string };
      /** What one turn cost: the tokens llama-server processed and those it took from its cache, and who answered. */
      type Turn = { processed: number; cached: number; replica: string };
      const auth = () => ({ authorization: `Bearer ${key}` });
      /** Each as its agent sends it: Claude Code (Anthropic Messages, its header), Codex (Responses, its header and body field), a chat client naming its session in Codex's other spelling. */
      const SESSIONS: Record<string, (messages: Message[]) => Promise<Turn>> = {
        "claude-1": async (messages) => {
          const answer = await ask(target, "POST", "/v1/messages", { model, system: "You are a coding agent.", messages, max_tokens: 2, temperature: 0 }, { ...auth(), "x-claude-code-session-id": "claude-1" });
          expect(answer.status, answer.body).toBe(200);
          const { input_tokens, cache_read_input_tokens } = answer.json().usage as { input_tokens: number; cache_read_input_tokens: number };
          return { processed: input_tokens, cached: cache_read_input_tokens, replica: String(servedBy(answer)) };
        },
        "codex-1": async (messages) => {
          const body = { model, instructions: "You are a coding agent.", input: messages, prompt_cache_key: "codex-1", store: false, max_output_tokens: 2, temperature: 0 };
          const answer = await ask(target, "POST", "/v1/responses", body, { ...auth(), "session-id": "codex-1" });
          expect(answer.status, answer.body).toBe(200);
          const usage = answer.json().usage as { input_tokens: number; input_tokens_details: { cached_tokens: number } };
          return { processed: usage.input_tokens - usage.input_tokens_details.cached_tokens, cached: usage.input_tokens_details.cached_tokens, replica: String(servedBy(answer)) };
        },
        "chat-1": async (messages) => {
          const body = { model, messages: [{ role: "system", content: "You are a coding agent." }, ...messages], max_tokens: 2, temperature: 0 };
          const answer = await ask(target, "POST", "/v1/chat/completions", body, { ...auth(), session_id: "chat-1" });
          expect(answer.status, answer.body).toBe(200);
          const { prompt_n, cache_n } = answer.json().timings as { prompt_n: number; cache_n: number };
          return { processed: prompt_n, cached: cache_n, replica: String(servedBy(answer)) };
        },
      };
      const names = Object.keys(SESSIONS);
      /** Each session's own long history (a file it read): what it would process again where its conversation is not. */
      const history = (name: string) => `Fix the failing test in ${name}.ts, please. It reads:\n${Array.from({ length: 30 }, (_, i) => `export const value${i} = parse(${name}${i});`).join("\n")}`;
      const conversations = new Map(names.map((name) => [name, [{ role: "user", content: history(name) }] as Message[]]));
      const last = new Map<string, Turn>();
      /** The session's next turn: its conversation so far, an answer and a new question added. */
      async function next(name: string): Promise<Turn> {
        const messages = conversations.get(name)!;
        if (last.has(name)) messages.push({ role: "assistant", content: "Done." }, { role: "user", content: `Step ${messages.length}: now run the tests.` });
        const turn = await SESSIONS[name]!(messages);
        last.set(name, turn);
        return turn;
      }
      /**
       * Processed only what the turn added: the whole conversation before it came from a slot, in
       * place or restored (a conversation restored from its file was seen to give one token of it
       * back, as in test/inference/affinity.test.ts's restart).
       */
      const onlyNew = (turn: Turn, before: Turn, what: string) => {
        expect(turn.processed, `${what}: ${JSON.stringify(turn)}`).toBeLessThan(60);
        expect(turn.cached, `${what}: ${JSON.stringify(turn)}`).toBeGreaterThanOrEqual(before.processed + before.cached - 1);
      };
      const parked = async (replica: string) => {
        const { stdout } = await podman.run(["exec", container(replica), "ls", "/models/slot-cache"]);
        return stdout.split("\n").filter((name) => /-p[0-9a-f]{32}\.json$/.test(name));
      };

      it("each session's turns go to one replica, each turn after the first processing only its new tokens; new sessions spread over both", async () => {
        const first = new Map<string, Turn>();
        for (const name of names) first.set(name, await next(name));
        for (const [name, turn] of first) expect(turn.processed, name).toBeGreaterThan(history(name).length / 2);
        // Sessions are placed by the fewest open requests when they start: the three land on both.
        expect(new Set([...first.values()].map((t) => t.replica))).toEqual(new Set(REPLICAS));
        for (let round = 0; round < 2; round++) {
          for (const name of names) {
            const before = last.get(name)!;
            const turn = await next(name);
            expect(turn.replica, name).toBe(first.get(name)!.replica);
            onlyNew(turn, before, name);
          }
        }
      }, 300_000);

      it("a replica stopped parks its sessions on the store; the other restores them, each going on with only its new tokens, and keeps them once it is back", async () => {
        const stopped = last.get(names[0]!)!.replica;
        const other = REPLICAS.find((name) => name !== stopped)!;
        const moved = names.filter((name) => last.get(name)!.replica === stopped);
        const stayed = names.filter((name) => !moved.includes(name));
        expect(await parked(other)).toEqual([]);
        // SIGTERM: it drains, and its runner parks the sessions in its slots into the shared volume.
        await compose(["stop", stopped]);
        try {
          expect(await parked(other), "the stopped replica's sessions, parked").toHaveLength(moved.length);
          for (const name of names) {
            const before = last.get(name)!;
            const turn = await next(name);
            console.log(`${name} (${moved.includes(name) ? `moved from ${stopped}` : "stayed"}): ${turn.processed} tokens processed, ${turn.cached} from its slot, at ${turn.replica}`);
            expect(turn.replica, name).toBe(other);
            onlyNew(turn, before, `${name} after ${stopped} stopped (${moved.includes(name) ? "restored from its parked file" : "in its slot"})`);
          }
          expect(await parked(other), "restored, and removed").toEqual([]);
        } finally {
          // Back (the next test kills a running replica): new requests reach it again.
          await podman.run(["start", container(stopped)]);
        }
        // The sessions that moved stay where their conversations now are.
        await untilServedBy([stopped], "the stopped replica serving again");
        for (const name of [...moved, ...stayed]) {
          const before = last.get(name)!;
          const turn = await next(name);
          expect(turn.replica, name).toBe(other);
          onlyNew(turn, before, `${name} once ${stopped} was back`);
        }
      }, 300_000);
    });

    it("keeps serving from the other replica when one is killed, and takes the killed one back once it restarts", async () => {
      await untilServedBy(REPLICAS, "both replicas serving before one is killed");
      const { stdout } = await podman.run(["inspect", "--format", "{{.State.Pid}}", container(REPLICAS[0]!)]);
      // A container not running has pid 0, and a kill of pid 0 would end this test's own process group.
      const pid = Number(stdout.trim());
      expect(pid).toBeGreaterThan(0);
      process.kill(pid, "SIGKILL");
      const answers = [];
      for (let i = 0; i < 10; i++) answers.push(await chat());
      expect(answers.map((a) => a.status)).toEqual(Array(10).fill(200));
      // The first one right after the kill: the killed replica cannot be back yet.
      expect(servedBy(answers[0]!)).toBe(REPLICAS[1]);
      // restart: unless-stopped brings it back; the gateway sends to it again once /readyz says so.
      await untilServedBy([REPLICAS[0]!], "the killed replica serving again");
    }, 300_000);
  });
});

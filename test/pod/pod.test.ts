import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isAlive, startRunnerService } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { bulkyChat, pausedStream } from "../support/paused-stream.ts";
import { pushModel, startRegistry, type Registry } from "../support/registry.ts";
import type { ServerProcess } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// A replica as Kubernetes runs it, through real processes: the server under each runtime with a pinned model
// that only the registry has (it is pulled at start), real llama-server runners, API keys on, the
// probes open; then SIGTERM in the middle of a streamed answer.

const KEY = { authorization: "Bearer pod-key" };

describe.each(["bun", "node", "deno"] as const)("a replica with a pinned model, under %s", (runtime) => {
  let registry: Registry;
  let dir: string;
  let server: ServerProcess;
  let url: string;
  /** Every /readyz status seen, with whether the pinned runner was ready right after it. */
  const probes: { status: number; runnerReady: boolean; body: string }[] = [];

  const target = () => ({ url });
  const ps = async () => (await ask(target(), "GET", "/engines/ps", undefined, KEY)).json() as { model_name: string; state: string }[];
  const pinnedReady = async () => (await ps()).some((r) => r.model_name === "ai/pinned:latest" && r.state === "ready");

  beforeAll(async () => {
    registry = await startRegistry();
    await pushModel(registry, "ai/pinned", "latest", tinyLlamaGguf({ seed: 1 }));
    await pushModel(registry, "ai/other", "latest", tinyLlamaGguf({ seed: 2 }));
    dir = await mkdtemp(join(tmpdir(), "llamadock-pod-"));
    await writeFile(join(dir, "keys"), "pod-key name=ops admin\n");
    server = await startRunnerService(runtime, dir, registry, {
      PINNED_MODELS: "ai/pinned",
      // An admin key: the test unloads, deletes and pulls with it (the pinned model is pulled by the process itself).
      API_KEYS_FILE: join(dir, "keys"),
      // Any runner not pinned is unloaded as soon as it is idle.
      INFERENCE_KEEP_ALIVE: "0",
      SHUTDOWN_GRACE_MS: "60000",
    });
    url = /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
    // Probed as the kubelet does, with no key; each answer checked against the runner's state then.
    await until(async () => {
      const answer = await ask(target(), "GET", "/readyz");
      probes.push({ status: answer.status, runnerReady: await pinnedReady(), body: answer.body });
      return answer.status === 200;
    }, "readiness");
  }, 120_000);

  afterAll(async () => {
    await server?.stop(10_000);
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("pulls the pinned model at start and loads it before readiness turns 200", () => {
    expect(server.output()).toContain("pinned model ai/pinned: pulling");
    const first = probes.findIndex((p) => p.status === 200);
    expect(probes[first]!.runnerReady).toBe(true);
    for (const probe of probes.slice(0, first)) {
      expect(probe.status).toBe(503);
      expect(JSON.parse(probe.body)).toMatchObject({ error: { type: "unavailable_error", code: "not_ready" } });
    }
  });

  it("answers the probes without a key, and nothing else", async () => {
    expect((await ask(target(), "GET", "/livez")).json()).toEqual({ status: "alive" });
    expect((await ask(target(), "GET", "/readyz")).json()).toEqual({ status: "ready" });
    expect((await ask(target(), "GET", "/engines/ps")).status).toBe(401);
  });

  it("keeps the pinned runner loaded after its requests (where keep-alive 0 would unload another), unload and delete", async () => {
    const answer = await ask(target(), "POST", "/v1/chat/completions", { model: "ai/pinned", messages: [{ role: "user", content: "hi" }], max_tokens: 3 }, KEY);
    expect(answer.status).toBe(200);
    const unloaded = await ask(target(), "POST", "/engines/unload", { all: true }, KEY);
    expect(unloaded.json()).toEqual({ unloaded_runners: 0 });
    const deleted = await ask(target(), "DELETE", "/models/ai/pinned", undefined, KEY);
    expect(deleted.status).toBe(409);
    expect(deleted.json()).toMatchObject({ error: { code: "model_pinned" } });
    expect(await pinnedReady()).toBe(true);
  });

  it("refuses a model that is not pinned with 404, even once it is in the store", async () => {
    const pulled = await ask(target(), "POST", "/models/create", { from: "ai/other" }, KEY);
    expect(pulled.body).toContain('"success"');
    const answer = await ask(target(), "POST", "/v1/chat/completions", { model: "ai/other", messages: [{ role: "user", content: "hi" }] }, KEY);
    expect(answer.status).toBe(404);
    expect(answer.json()).toMatchObject({ error: { type: "not_found_error" } });
    // Ollama's load (an empty prompt) goes to the scheduler without a forward: refused as well.
    const load = await ask(target(), "POST", "/api/generate", { model: "ai/other", prompt: "" }, KEY);
    expect(load.status).toBe(404);
    expect((await ask(target(), "GET", "/engines/ps", undefined, KEY)).json().map((r: { model_name: string }) => r.model_name)).not.toContain("ai/other:latest");
  });

  it("on SIGTERM fails readiness and refuses new requests with 503, lets a stream finish, then stops its runners", async () => {
    const pids = await runnerPids();
    expect(pids.length).toBeGreaterThan(0);
    const stream = await pausedStream(join(dir, "runner.sock"), "/v1/chat/completions", bulkyChat("ai/pinned"));
    server.child.kill("SIGTERM");
    await server.waitForOutput(/SIGTERM received/);
    const refused = await ask(target(), "POST", "/v1/chat/completions", { model: "ai/pinned", messages: [{ role: "user", content: "hi" }] }, KEY);
    expect(refused.status).toBe(503);
    expect(refused.json()).toMatchObject({ error: { type: "unavailable_error", code: "shutting_down" } });
    expect((await ask(target(), "GET", "/readyz")).status).toBe(503);
    expect((await ask(target(), "GET", "/livez")).status).toBe(200);
    // The stream is still held by its runner: it is in flight, not already buffered to its end.
    const metrics = (await ask(target(), "GET", "/metrics", undefined, KEY)).body;
    expect(metrics).toMatch(/^llamadock:num_requests_running\{model_name="ai\/pinned:latest"\} 1$/m);
    const text = await stream.rest();
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(text).toContain('"predicted_n":440,');
    expect(await server.exited).toBe(0);
    expect(pids.filter(isAlive)).toEqual([]);
  }, 120_000);

  async function runnerPids(): Promise<number[]> {
    const names = (await readdir(join(dir, "run"))).filter((n) => n.endsWith(".pid"));
    return Promise.all(names.map(async (n) => (JSON.parse(await readFile(join(dir, "run", n), "utf8")) as { pid: number }).pid));
  }
});

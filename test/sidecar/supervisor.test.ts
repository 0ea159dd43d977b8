import { existsSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { launchEnv } from "../../sidecar/binary.ts";
import { createSupervisor, SidecarError, type RunnerSpec, type Sidecar, type Supervisor } from "../../sidecar/index.ts";
import { eventually, isGone, runnersOn, sidecarWorld, type SidecarWorld } from "./harness.ts";

let world: SidecarWorld;
let supervisor: Supervisor;
const started: Sidecar[] = [];

beforeAll(async () => {
  world = await sidecarWorld();
  supervisor = createSupervisor({ ...world, readyTimeoutMs: 60_000, stopGraceMs: 3_000 });
});
afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.stop()));
});
afterAll(async () => world.remove());

async function start(spec: Partial<RunnerSpec> & { name: string }, signal?: AbortSignal): Promise<Sidecar> {
  const sidecar = await supervisor.start({ modelPath: world.modelPath, mode: "completion", ...spec }, signal);
  started.push(sidecar);
  return sidecar;
}

async function startError(spec: Partial<RunnerSpec> & { name: string }, signal?: AbortSignal): Promise<SidecarError> {
  const error = await start(spec, signal).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SidecarError);
  return error as SidecarError;
}

const post = (sidecar: Sidecar, path: string, body: object) =>
  sidecar.fetch(`http://runner${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("a completion runner on the tiny model", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await supervisor.start({ name: "chat", modelPath: world.modelPath, mode: "completion" });
  });
  afterAll(async () => sidecar.stop());

  it("is ready and healthy", async () => {
    expect(sidecar.state).toBe("ready");
    const health = await sidecar.fetch("http://runner/health");
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: "ok" });
  });

  it("answers a chat completion", async () => {
    const response = await post(sidecar, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 8, ignore_eos: true });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { choices: { message: { role: string; content: string } }[]; usage: { completion_tokens: number } };
    expect(body.choices[0]?.message.role).toBe("assistant");
    expect(typeof body.choices[0]?.message.content).toBe("string");
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
    expect(body.usage.completion_tokens).toBeLessThanOrEqual(8);
  });

  it("streams a chat completion as SSE ending with [DONE]", async () => {
    const response = await post(sidecar, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 8, ignore_eos: true, stream: true });
    expect(response.headers.get("content-type")).toMatch(/text\/event-stream/);
    const events = (await response.text()).split("\n").filter((line) => line.startsWith("data: "));
    expect(events.length).toBeGreaterThan(2);
    expect(events.at(-1)).toBe("data: [DONE]");
    expect(JSON.parse(events[0]!.slice(6)).object).toBe("chat.completion.chunk");
  });

  it("answers a text completion", async () => {
    const response = await post(sidecar, "/v1/completions", { prompt: "once upon", max_tokens: 4, ignore_eos: true });
    const body = (await response.json()) as { choices: { text: string }[]; model: string };
    expect(typeof body.choices[0]?.text).toBe("string");
    expect(body.model).toBe("chat");
  });

  it("serves Prometheus metrics", async () => {
    const response = await sidecar.fetch("http://runner/metrics");
    expect(response.status).toBe(200);
    expect(await response.text()).toMatch(/^llamacpp:tokens_predicted_total \d+/m);
  });

  it("writes its output to the runner's log", () => {
    expect(sidecar.logTail()).toMatch(/llama_server|srv/);
    expect(existsSync(join(world.logDir, "chat.log"))).toBe(true);
  });
});

describe("supervisor", () => {
  it("runs an embedding runner that answers /v1/embeddings", async () => {
    // The tiny model declares no pooling (as chat models): the scheduler would choose mean.
    const sidecar = await start({ name: "embed", mode: "embedding", pooling: "mean" });
    const response = await post(sidecar, "/v1/embeddings", { input: ["hello", "world"] });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { data: { embedding: number[] }[] };
    expect(body.data).toHaveLength(2);
    expect(body.data[0]?.embedding).toHaveLength(64);
    expect(body.data[0]?.embedding.every(Number.isFinite)).toBe(true);
  });

  it("runs two runners at once on two sockets", async () => {
    const [a, b] = await Promise.all([start({ name: "one" }), start({ name: "two" })]);
    expect(a.socketPath).not.toBe(b.socketPath);
    expect(a.pid).not.toBe(b.pid);
    const ids = await Promise.all(
      [a, b].map(async (s) => ((await (await s.fetch("http://runner/v1/models")).json()) as { data: { id: string }[] }).data[0]?.id),
    );
    expect(ids).toEqual(["one", "two"]);
  });

  it("stops: SIGTERM, then the socket and pid file are gone", async () => {
    const sidecar = await start({ name: "stopme" });
    await sidecar.stop();
    expect(sidecar.state).toBe("stopped");
    expect(isGone(sidecar.pid)).toBe(true);
    expect(existsSync(sidecar.socketPath)).toBe(false);
    expect(existsSync(join(world.runDir, "stopme.pid"))).toBe(false);
  });

  it("B10: a runner whose log file cannot be written (full disk) still starts, answers and stops", async () => {
    mkdirSync(world.logDir, { recursive: true });
    symlinkSync("/dev/full", join(world.logDir, "fulldisk.log")); // every write fails with ENOSPC
    const sidecar = await start({ name: "fulldisk" });
    const response = await post(sidecar, "/v1/completions", { prompt: "once upon", max_tokens: 4, ignore_eos: true });
    expect(response.status).toBe(200);
    expect(sidecar.logTail()).toMatch(/llama_server|srv/);
    await sidecar.stop();
    expect(sidecar.state).toBe("stopped");
  });

  it("B14: a pid file that cannot be written fails the start and leaves no llama-server behind", async () => {
    symlinkSync("/dev/full", join(world.runDir, "nopid.pid")); // writing the pid file fails with ENOSPC
    const error = await startError({ name: "nopid" });
    expect(error.code).toBe("spawn_failed");
    expect(error.message).toMatch(/nopid\.pid/);
    expect(runnersOn(join(world.runDir, "nopid.sock"))).toEqual([]);
  });

  it("starts despite a stale socket file left by a killed llama-server", async () => {
    const socketPath = join(world.runDir, "stale.sock");
    const { runtime, binary } = world;
    const args = ["-m", world.modelPath, "--host", socketPath, "--port", "0"];
    const stray = await runtime.spawn(binary.path, args, { env: launchEnv(binary.path, process.env) });
    expect(await eventually(() => existsSync(socketPath))).toBe(true);
    stray.kill("SIGKILL");
    await stray.exited;
    expect(existsSync(socketPath)).toBe(true); // llama-server does not remove it
    const sidecar = await start({ name: "stale" });
    expect(sidecar.state).toBe("ready");
  });

  it("notices a SIGKILL of the child, reports it with its output, and starts again", async () => {
    const sidecar = await start({ name: "victim" });
    process.kill(sidecar.pid, "SIGKILL");
    const error = (await sidecar.exited) as SidecarError;
    expect(error.code).toBe("exited");
    expect(error.message).toMatch(/^llama-server killed by SIGKILL/);
    expect(error.tail).toMatch(/llama_server/);
    expect(sidecar.state).toBe("failed");
    expect(existsSync(sidecar.socketPath)).toBe(false);
    const again = await start({ name: "victim" });
    expect(again.state).toBe("ready");
  });

  it("fails clearly on a file that is not GGUF", async () => {
    const path = join(world.dir, "corrupt.gguf");
    writeFileSync(path, "this is not a model".repeat(100));
    const error = await startError({ name: "corrupt", modelPath: path });
    expect(error.code).toBe("invalid_model");
    expect(error.message).toBe("the model file is not a GGUF file");
  });

  it("fails clearly on a truncated GGUF", async () => {
    const path = join(world.dir, "truncated.gguf");
    const { tinyLlamaGguf } = await import("../support/tiny-gguf.ts");
    writeFileSync(path, tinyLlamaGguf().subarray(0, 100_000));
    const error = await startError({ name: "truncated", modelPath: path });
    expect(error.message).toBe("the model file is corrupt or incomplete");
  });

  it("fails clearly on a missing model file", async () => {
    const path = join(world.dir, "absent.gguf");
    const error = await startError({ name: "absent", modelPath: path });
    expect(error.code).toBe("model_not_found");
    expect(error.message).toBe(`model file not found: ${path}`);
  });

  it("hands the model's projector to llama-server: a file that is not one fails clearly", async () => {
    const error = await startError({ name: "projector", mmprojPath: world.modelPath });
    expect(error.code).toBe("invalid_model");
    expect(error.message).toBe(`cannot load the multimodal projector ${world.modelPath}`);
  });

  it("fails clearly on an invalid flag", async () => {
    const error = await startError({ name: "badflag", extraArgs: ["--no-such-flag"] });
    expect(error.code).toBe("bad_argument");
    expect(error.message).toBe("llama-server does not know the option --no-such-flag");
  });

  it("rejects an invalid spec before spawning anything", async () => {
    const error = await startError({ name: "../escape" });
    expect(error.code).toBe("bad_argument");
    expect(existsSync(join(world.logDir, "../escape.log"))).toBe(false);
  });

  it("gives up at the ready deadline and leaves no process", async () => {
    const impatient = createSupervisor({ ...world, readyTimeoutMs: 1 });
    const error = await impatient.start({ name: "slow", modelPath: world.modelPath, mode: "completion" }).then(
      () => expect.fail("started within 1 ms"),
      (e: SidecarError) => e,
    );
    expect(error.code).toBe("ready_timeout");
    expect(existsSync(join(world.runDir, "slow.sock"))).toBe(false);
    expect(existsSync(join(world.runDir, "slow.pid"))).toBe(false);
  });

  it("stops a start when its signal aborts", async () => {
    expect((await startError({ name: "aborted" }, AbortSignal.abort())).code).toBe("aborted");
    const controller = new AbortController();
    const pending = start({ name: "aborted" }, controller.signal).catch((e: SidecarError) => e);
    controller.abort();
    const late = (await pending) as SidecarError;
    expect(late.code).toBe("aborted");
    expect(existsSync(join(world.runDir, "aborted.pid"))).toBe(false);
  });

  it("ends a llama-server a previous run left behind, after checking its command line", async () => {
    const { runtime, binary } = world;
    const socket = join(world.runDir, "left.sock");
    const args = ["-m", world.modelPath, "--host", socket, "--port", "0"];
    const left = await runtime.spawn(binary.path, args, { env: launchEnv(binary.path, process.env) });
    const deadOwner = await runtime.spawn("true", [], { env: {} });
    await deadOwner.exited;
    writeFileSync(join(world.runDir, "left.pid"), JSON.stringify({ pid: left.pid, owner: deadOwner.pid, socket }));
    // A pid file whose pid is some other process must not get that process killed.
    const bystander = await runtime.spawn("sleep", ["30"], { env: {} });
    writeFileSync(join(world.runDir, "reused.pid"), JSON.stringify({ pid: bystander.pid, owner: deadOwner.pid, socket: join(world.runDir, "reused.sock") }));
    await supervisor.cleanupLeftovers();
    expect(await left.exited).toEqual({ code: null, signal: "SIGKILL" });
    expect(existsSync(socket)).toBe(false);
    expect(existsSync(join(world.runDir, "left.pid"))).toBe(false);
    expect(existsSync(join(world.runDir, "reused.pid"))).toBe(false);
    expect(isGone(bystander.pid)).toBe(false);
    bystander.kill("SIGKILL");
    await bystander.exited;
  });

  it("B11: ends a left llama-server whose record names our own pid as owner (a container's reused pid)", async () => {
    const { runtime, binary } = world;
    const runDir = join(world.dir, "run-b11");
    mkdirSync(runDir);
    const socket = join(runDir, "mine.sock");
    const args = ["-m", world.modelPath, "--host", socket, "--port", "0"];
    const left = await runtime.spawn(binary.path, args, { env: launchEnv(binary.path, process.env) });
    // Another live process as owner still means the record is someone else's, in use.
    const otherOwner = await runtime.spawn("sleep", ["30"], { env: {} });
    try {
      writeFileSync(join(runDir, "mine.pid"), JSON.stringify({ pid: left.pid, owner: process.pid, socket }));
      const theirs = { pid: otherOwner.pid, owner: otherOwner.pid, socket: join(runDir, "theirs.sock") };
      writeFileSync(join(runDir, "theirs.pid"), JSON.stringify(theirs));
      await createSupervisor({ ...world, runDir }).cleanupLeftovers();
      expect(isGone(left.pid)).toBe(true);
      expect(await left.exited).toEqual({ code: null, signal: "SIGKILL" });
      expect(existsSync(join(runDir, "mine.pid"))).toBe(false);
      expect(existsSync(join(runDir, "theirs.pid"))).toBe(true);
      expect(isGone(otherOwner.pid)).toBe(false);
    } finally {
      left.kill("SIGKILL");
      otherOwner.kill("SIGKILL");
      await Promise.all([left.exited, otherOwner.exited]);
    }
  });
});

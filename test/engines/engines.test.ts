import { mkdir, mkdtemp, readdir, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { publishEngine } from "../../src/engines/publish.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_EARLY_STOP, startStack, type Stack } from "../inference/harness.ts";
import { ask, openStream } from "../support/http.ts";
import { until } from "../support/until.ts";
import { needingNewGlibc, publishBuild, tamperBlob } from "../support/engine-builds.ts";
import { llamadock } from "../cli/command.ts";
import { smallFilesystem } from "../support/small-filesystem.ts";

// Engines end to end: llama.cpp builds published to a real registry (the setup's llama-server, and
// the same binary behind wrappers that play other releases), pulled by the server, chosen per model
// and as the default, runners moved to a new build with a request in flight, flags spelled for each
// build, and what must be refused refused: a tampered layer, a build needing a newer glibc, a
// setting a build lacks, a pull its store's filesystem cannot hold.

const MiB = 1024 * 1024;

type Ps = { model_name: string; state: string; engine: string; engine_version?: string; in_flight: number }[];
type Event = { kind: string; engine: string; model?: string; message: string };

const chat = (model: string) => ({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, ...NO_EARLY_STOP });
/** A generation that goes on until its client leaves (context shift on, end of stream ignored). */
const endless = (model: string) => ({ model, prompt: "x", max_tokens: 1_000_000, ignore_eos: true, stream: true });

function api(stack: Stack) {
  const target = () => ({ url: stack.url });
  return {
    ask: (method: string, path: string, body?: object) => ask(target(), method, path, body),
    ps: async () => (await ask(target(), "GET", "/engines/ps")).json() as Ps,
    events: async () => (await ask(target(), "GET", "/engines/builds/events")).json() as Event[],
    configure: (body: object) => ask(target(), "POST", "/engines/_configure", body),
    stream: (body: object, count: number) => openStream(target(), "/engines/v1/completions", body, count),
  };
}

describe("engines on Bun: pull, choose, upgrade, refuse", () => {
  let stack: Stack;
  let http: ReturnType<typeof api>;
  const refs: Record<string, string> = {};
  beforeAll(async () => {
    // Room for a runner on the new build beside the old ones: without it, the old one retires when idle
    // instead. A failed move is tried again by the next request, without a wait.
    stack = await startStack({ models: ["ai/tiny", "ai/other"], env: { INFERENCE_MAX_TOKENS: "1000000", INFERENCE_MAX_RUNNERS: "4", ENGINE_MOVE_RETRY: "0" } });
    http = api(stack);
    refs.v1 = (await publishBuild(stack.registry, "as-built", "v1")).reference;
    refs.v2 = (await publishBuild(stack.registry, "renamed", "v2")).reference;
    refs.broken = (await publishBuild(stack.registry, "broken", "broken")).reference;
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it("pulls two builds side by side, each with its version, variant and digest, and counts them in df", async () => {
    for (const tag of ["v1", "v2"]) {
      const pulled = await http.ask("POST", "/engines/builds", { reference: refs[tag]! });
      expect(pulled.status, pulled.body).toBe(201);
      expect(pulled.json()).toMatchObject({ name: tag, variant: "cpu", layout: "llama.cpp", digest: expect.stringMatching(/^sha256:/) });
    }
    const { builds } = (await http.ask("GET", "/engines/builds")).json() as { builds: { name: string; version: string; default: boolean }[] };
    expect(builds.map((b) => b.name)).toEqual(["builtin", "v1", "v2"]);
    expect(builds[0]!.default).toBe(true);
    expect(builds[2]!.version).toMatch(/^0\.4\.9-renamed /);
    expect(builds[1]!.version).toBe(builds[0]!.version);
    const df = (await http.ask("GET", "/engines/df")).json() as { engines_disk_usage: number };
    expect(df.engines_disk_usage).toBeGreaterThan(1_000_000);
    // Only the unpacked builds are kept: no layer file, no unfinished pull.
    const folders = await readdir(join(stack.dir, "models", "engines"));
    expect(folders.filter((f) => f.startsWith(".incoming"))).toEqual([]);
  });

  it("follows an image index to this host's platform", async () => {
    const manifest = await fetch(`${stack.registry.url}/v2/llamadock/llama-server/manifests/v2`, { headers: { accept: "application/vnd.oci.image.manifest.v1+json" } });
    const bytes = new Uint8Array(await manifest.arrayBuffer());
    const digest = manifest.headers.get("docker-content-digest")!;
    const entry = (architecture: string) => ({ mediaType: "application/vnd.oci.image.manifest.v1+json", digest, size: bytes.byteLength, platform: { os: "linux", architecture } });
    const index = { schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [entry("s390x"), entry(process.arch === "arm64" ? "arm64" : "amd64")] };
    const put = await fetch(`${stack.registry.url}/v2/llamadock/llama-server/manifests/multi`, { method: "PUT", headers: { "content-type": index.mediaType }, body: JSON.stringify(index) });
    expect(put.status).toBe(201);
    const pulled = await http.ask("POST", "/engines/builds", { reference: refs.v2!.replace(/:v2$/, ":multi") });
    expect(pulled.status, pulled.body).toBe(201);
    // The platform's manifest is v2's: the build already there.
    expect(pulled.json()).toMatchObject({ name: "v2", digest });
  });

  it("takes Docker Model Runner's backend layout: the binary in bin/, its libraries in lib/", async () => {
    const dmr = await publishBuild(stack.registry, "as-built", "dmr-cpu", (folder) => writeFile(join(folder, "NOTES"), "dmr"), { kind: "docker-model-runner", variant: "cpu" });
    const pulled = await http.ask("POST", "/engines/builds", { reference: dmr.reference });
    expect(pulled.status, pulled.body).toBe(201);
    expect(pulled.json()).toMatchObject({ name: "dmr-cpu", layout: "docker-model-runner", variant: "cpu", version: expect.stringMatching(/^0\.5\.0-dev /) });
    expect((await http.configure({ model: "ai/tiny", engine: "dmr-cpu" })).status).toBe(202);
    const answer = await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"));
    expect(answer.status, answer.body).toBe(200);
    expect((await http.ps()).find((r) => r.model_name === "ai/tiny:latest")).toMatchObject({ engine: "dmr-cpu" });
    expect((await http.configure({ model: "ai/tiny", engine: "v1" })).status).toBe(202);
    await until(async () => (await http.ps()).filter((r) => r.model_name === "ai/tiny:latest").map((r) => `${r.engine} ${r.state}`).join() === "v1 ready", "ai/tiny on v1 alone");
    expect((await http.ask("DELETE", "/engines/builds/dmr-cpu")).status).toBe(200);
  });

  it("launches a model on the build its settings name, and says which in ps and status", async () => {
    expect((await http.configure({ model: "ai/tiny", engine: "v1", "runtime-flags": ["--context-shift"] })).status).toBe(202);
    const answer = await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"));
    expect(answer.status, answer.body).toBe(200);
    const other = await http.ask("POST", "/engines/v1/chat/completions", chat("ai/other"));
    expect(other.status, other.body).toBe(200);
    const ps = await http.ps();
    expect(ps.find((r) => r.model_name === "ai/tiny:latest")).toMatchObject({ engine: "v1" });
    expect(ps.find((r) => r.model_name === "ai/other:latest")).toMatchObject({ engine: "builtin" });
    const status = (await http.ask("GET", "/engines/status?runners")).json() as { runners: { model: string; engine: string }[] };
    expect(status.runners.map((r) => r.engine).sort()).toEqual(["builtin", "v1"]);
  });

  it("moves a model to a new build with a request in flight: the request goes on, the old runner retires when idle", async () => {
    const stream = http.stream(endless("ai/tiny"), 3);
    await stream.started;
    const seen = (await http.events()).length;
    expect((await http.configure({ model: "ai/tiny", engine: "v2" })).status).toBe(202);
    await until(async () => (await http.events()).slice(seen).some((e) => e.kind === "upgraded" && e.model === "ai/tiny:latest"), "the move to v2");
    // The live state the page streams carries the last events too.
    const live = (await http.ask("GET", "/engines/state")).json() as { engine_events: Event[] };
    expect(live.engine_events.at(-1)).toMatchObject({ kind: "upgraded", model: "ai/tiny:latest", engine: "v2" });
    // Both runners now: the new one serving, the old one finishing the request it holds.
    const during = (await http.ps()).filter((r) => r.model_name === "ai/tiny:latest");
    expect(during.map((r) => `${r.engine} ${r.state}`).sort()).toEqual(["v1 draining", "v2 ready"]);
    const before = stream.text().length;
    await until(() => stream.text().length > before + 200, "more of the stream after the move");
    expect(stream.status()).toBe(200);
    // A new request goes to the new build while the old one still streams.
    expect((await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"))).status).toBe(200);
    stream.hangUp();
    await until(async () => (await http.ps()).filter((r) => r.model_name === "ai/tiny:latest").length === 1, "the old runner to retire");
    expect((await http.ps()).find((r) => r.model_name === "ai/tiny:latest")).toMatchObject({ engine: "v2", state: "ready" });
    expect(await stack.runnerLogs()).toMatch(/llama-server 0\.4\.9-renamed .*\(v2\)/);
  });

  it("spells a renamed flag the way the build takes it, and refuses a flag the build lacks by name", async () => {
    expect((await http.configure({ model: "ai/tiny", "runtime-flags": ["--context-shift", "-cms", "4096"] })).status).toBe(202);
    const answer = await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"));
    expect(answer.status, answer.body).toBe(200);
    // v2 spells it -cpent; its wrapper turns it back for the binary, which would refuse -cpent.
    expect(await stack.runnerLogs()).toMatch(/\(v2\): .*--context-shift -cpent 4096/);
    const refused = await http.configure({ model: "ai/tiny", "runtime-flags": ["--swa-full"] });
    expect(refused.status).toBe(400);
    expect(refused.json().error).toMatchObject({ code: "unsupported_by_engine", message: expect.stringMatching(/llama-server v2 \(0\.4\.9-renamed .*\) has no flag --swa-full/) });
    // The same flag on the build that has it is taken.
    expect((await http.configure({ model: "ai/other", "runtime-flags": ["--swa-full"] })).status).toBe(202);
  });

  it("keeps the old build serving when the new one fails to load, says so in ps, and tries again on a later request until a fixed build takes over", async () => {
    expect((await http.ask("POST", "/engines/builds", { reference: refs.broken! })).status).toBe(201);
    expect((await http.configure({ model: "ai/tiny", engine: "broken" })).status).toBe(202);
    const failures = async () => (await http.events()).filter((e) => e.kind === "upgrade_failed" && e.model === "ai/tiny:latest");
    await until(async () => (await failures()).length === 1, "the failed move");
    expect((await failures())[0]!.message).toMatch(/stays on v2: broken failed to load/);
    expect(stack.server.output()).toMatch(/engine upgrade_failed: ai\/tiny:latest/);
    const tiny = async () => (await http.ps()).filter((r) => r.model_name === "ai/tiny:latest") as (Ps[number] & { engine_move_failed?: { engine: string; message: string; tries: number; retry_at: string } })[];
    // ps says which build it runs, and which it failed to move to, and why.
    expect(await tiny()).toEqual([expect.objectContaining({ engine: "v2", state: "ready", engine_move_failed: { engine: "broken", message: expect.any(String), tries: 1, retry_at: expect.any(String) } })]);
    // A request is served by the old build, and tries the move again (ENGINE_MOVE_RETRY=0: at once).
    expect((await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"))).status).toBe(200);
    await until(async () => (await failures()).length === 2, "the move tried again");
    await until(async () => (await tiny())[0]?.engine_move_failed?.tries === 2, "ps to count the second failure");
    const status = (await http.ask("GET", "/engines/status?runners")).json() as { runners: { model: string; engine: string; engine_move_failed?: { engine: string } }[] };
    expect(status.runners.find((r) => r.model === "ai/tiny:latest")).toMatchObject({ engine: "v2", engine_move_failed: { engine: "broken" } });
    // The build is published again, fixed, under the same tag: the next request's try moves the model to it.
    const brokenRecord = (await http.ask("GET", "/engines/builds")).json().builds.find((b: { name: string }) => b.name === "broken");
    await publishBuild(stack.registry, "as-built", "broken", (folder) => writeFile(join(folder, "NOTES"), "fixed"));
    const fixed = await http.ask("POST", "/engines/builds", { reference: refs.broken! });
    expect(fixed.status, fixed.body).toBe(201);
    expect((await http.ask("DELETE", `/engines/builds/${brokenRecord.digest}`)).status).toBe(200);
    expect((await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"))).status).toBe(200);
    await until(async () => (await http.events()).some((e) => e.kind === "upgraded" && e.model === "ai/tiny:latest" && e.engine === "broken"), "the move to the fixed build");
    await until(async () => (await tiny()).map((r) => `${r.engine} ${r.state}`).join() === "broken ready", "ai/tiny on the fixed build alone");
    expect((await tiny())[0]!.engine_move_failed).toBeUndefined();
    expect((await http.configure({ model: "ai/tiny", engine: "v2" })).status).toBe(202);
    await until(async () => (await tiny()).map((r) => `${r.engine} ${r.state}`).join() === "v2 ready", "ai/tiny back on v2 alone");
  });

  it("moves the runners of models without their own engine when the default changes, and will not remove a build in use", async () => {
    // "default" follows the default in a model's settings; as the default itself it is refused, naming what is taken.
    const selfNamed = await http.ask("POST", "/engines/builds/default", { name: "default" });
    expect(selfNamed.status).toBe(400);
    expect(selfNamed.json().error).toMatchObject({ type: "invalid_request_error", code: "invalid_engine", message: expect.stringMatching(/tag, reference or digest, or "builtin"; null goes back/) });
    const used = await http.ask("POST", "/engines/builds/default", { name: "v1" });
    expect(used.json()).toMatchObject({ default: "v1" });
    await until(async () => (await http.ps()).some((r) => r.model_name === "ai/other:latest" && r.engine === "v1" && r.state === "ready"), "ai/other on v1");
    await until(async () => (await http.ps()).filter((r) => r.model_name === "ai/other:latest").length === 1, "ai/other's old runner to go");
    expect((await http.ps()).find((r) => r.model_name === "ai/tiny:latest")).toMatchObject({ engine: "v2" });
    const inUse = await http.ask("DELETE", "/engines/builds/v1");
    expect(inUse.status).toBe(409);
    expect(inUse.json().error.type).toBe("conflict_error");
    const removed = await http.ask("DELETE", "/engines/builds/broken");
    expect(removed.status, removed.body).toBe(200);
  });

  it("refuses a tampered layer and a build needing a newer glibc, keeping nothing of them", async () => {
    // A build of its own (a file more), so that no build already pulled shares its digest.
    const tampered = await publishBuild(stack.registry, "as-built", "tampered", (folder) => writeFile(join(folder, "NOTES"), "tampered"));
    await tamperBlob(stack.registry, tampered.layer.digest);
    const refusedTamper = await http.ask("POST", "/engines/builds", { reference: tampered.reference });
    expect(refusedTamper.status).toBe(502);
    expect(refusedTamper.json().error.message).toMatch(/does not match its digest/);
    const glibc = await publishBuild(stack.registry, "as-built", "newglibc", needingNewGlibc);
    const refusedGlibc = await http.ask("POST", "/engines/builds", { reference: glibc.reference });
    expect(refusedGlibc.status).toBe(400);
    expect(refusedGlibc.json().error).toMatchObject({ code: "engine_needs_newer_glibc", message: expect.stringMatching(/needs GLIBC_2\.99 and this host's C library is GLIBC_2\.\d+/) });
    const { builds } = (await http.ask("GET", "/engines/builds")).json() as { builds: { name: string }[] };
    expect(builds.map((b) => b.name)).toEqual(["builtin", "v1", "v2"]);
    const folders = await readdir(join(stack.dir, "models", "engines"));
    expect(folders.filter((f) => f.startsWith(".incoming"))).toEqual([]);
  });

  it("lists, pulls, chooses and removes builds with the command, keeps one build pulled under two names once, and serves DMR's backend calls", async () => {
    const cli = (...args: string[]) => llamadock(["--host", stack.url, ...args], {});
    const ls = await cli("engine", "ls");
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/^ {2}NAME\s+VERSION\s+VARIANT\s+DIGEST\s+SIZE\s+RUNNERS\s+PULLED\s+REFERENCE\n {2}builtin\s+0\.5\.0-dev .*\n\* v1\s+0\.5\.0-dev .*\n {2}v2\s+0\.4\.9-renamed /);
    // The setup's build published again under another tag is the same digest: nothing new is kept.
    const again = await publishBuild(stack.registry, "as-built", "v1-again");
    const pulled = await cli("engine", "pull", again.reference);
    expect(pulled.stdout).toMatch(/^Pulled v1: llama-server 0\.5\.0-dev/);
    const used = await cli("engine", "use", "builtin");
    expect(used.stdout).toMatch(/^Default engine: builtin \(0\.5\.0-dev .*\); 1 loaded runner moving/);
    await until(async () => (await http.ps()).filter((r) => r.model_name === "ai/other:latest").map((r) => `${r.engine} ${r.state}`).join() === "builtin ready", "ai/other back on builtin alone");
    const removed = await cli("engine", "rm", "v1");
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.stdout).toMatch(/^Removed v1 \(sha256:/);
    // DMR's shapes: install pulls and makes the default; uninstall of the default is refused.
    const installed = await http.ask("POST", "/engines/install-backend", { backend: "llama.cpp", reference: refs.v1! });
    expect(installed.status, installed.body).toBe(200);
    expect(installed.json()).toMatchObject({ backend: "llama.cpp", installed: "v1" });
    const uninstall = await http.ask("POST", "/engines/uninstall-backend", { backend: "llama.cpp", version: "v1" });
    expect(uninstall.status).toBe(409);
    // A backend not served here: 404, as DMR answers one it lacks.
    const vllm = await http.ask("POST", "/engines/install-backend", { backend: "vllm" });
    expect([vllm.status, vllm.json().error.code]).toEqual([404, "backend_not_found"]);
    // DMR's client uninstalls by backend alone: back to the built-in build, v1 kept in the store.
    const back = await http.ask("POST", "/engines/uninstall-backend", { backend: "llama.cpp" });
    expect(back.status, back.body).toBe(200);
    expect(back.json()).toMatchObject({ backend: "llama.cpp", default: "builtin" });
    expect((await http.ask("GET", "/engines/builds")).json()).toMatchObject({ default: "builtin", builds: expect.arrayContaining([expect.objectContaining({ name: "v1" })]) });
  });

  it("purges a pull left unfinished, counting its bytes", async () => {
    const leftover = join(stack.dir, "models", "engines", ".incoming-left");
    await mkdir(leftover, { recursive: true });
    await writeFile(join(leftover, "layer-0"), new Uint8Array(100_000));
    // Left by a process long gone: no owner file, untouched for longer than a pull's heartbeat allows.
    const longAgo = new Date(Date.now() - 3_600_000);
    await utimes(leftover, longAgo, longAgo);
    const purged = await http.ask("DELETE", "/models/purge?unused=true&older-than=0");
    expect(purged.status, purged.body).toBe(200);
    expect(purged.json()).toMatchObject({ engines_removed: [], removed_files: expect.any(Number) });
    expect(purged.json().freed_bytes).toBeGreaterThanOrEqual(100_000);
    expect((await readdir(join(stack.dir, "models", "engines"))).filter((f) => f.startsWith(".incoming"))).toEqual([]);
  });
  it("refuses with 507 a pull the engine store's filesystem cannot hold (a 1 MiB tmpfs), by every way in, keeping nothing", async (context) => {
    const small = await smallFilesystem(MiB, (why) => context.skip(why));
    const engines = join(small.path, "engines");
    const refusal = { type: "server_error", code: "insufficient_storage", message: expect.stringMatching(/^not enough free space to pull .*llamadock\/llama-server:v1: it needs [\d.]+MiB more, the engine store has [\d.]+(KiB|MiB) free$/) };
    try {
      // The build's default pulled on first use: the launch that needs it is refused.
      await stack.restart({ ENGINES_PATH: engines, LLAMA_SERVER_VERSION: refs.v1! });
      const launch = await http.ask("POST", "/engines/v1/chat/completions", chat("ai/other"));
      expect(launch.status, launch.body).toBe(507);
      expect(launch.json().error).toMatchObject(refusal);
      await stack.restart({ ENGINES_PATH: engines });
      const pulled = await http.ask("POST", "/engines/builds", { reference: refs.v1! });
      expect(pulled.status, pulled.body).toBe(507);
      expect(pulled.json().error).toMatchObject(refusal);
      const installed = await http.ask("POST", "/engines/install-backend", { backend: "llama.cpp", reference: refs.v1! });
      expect(installed.status, installed.body).toBe(507);
      expect(installed.json().error).toMatchObject(refusal);
      const cli = await llamadock(["--host", stack.url, "engine", "pull", refs.v1!], {});
      expect(cli.code).not.toBe(0);
      expect(cli.stderr).toMatch(/not enough free space to pull .*: it needs [\d.]+MiB more, the engine store has/);
      // Nothing fetched into the store, and the server still serves.
      expect(await readdir(engines).catch(() => [] as string[])).toEqual([]);
      const { builds } = (await http.ask("GET", "/engines/builds")).json() as { builds: { name: string }[] };
      expect(builds.map((b) => b.name)).toEqual(["builtin"]);
      expect((await http.events()).filter((e) => e.kind === "pull_failed")).toHaveLength(3);
      // A layer that fits but unpacks larger than the room left (4 MiB of zeros, gzipped) fills the disk while unpacking: 507 too.
      const scratch = await mkdtemp(join(tmpdir(), "llamadock-engine-zeros-"));
      await writeFile(join(scratch, "llama-server"), "#!/bin/sh\nexit 1\n", { mode: 0o755 });
      await writeFile(join(scratch, "libzeros.so"), new Uint8Array(4 * MiB));
      const zeros = await publishEngine(scratch, `${stack.registry.host}/llamadock/llama-server:zeros`, { fetch: globalThis.fetch.bind(globalThis), insecureHosts: [], credentials: {} }).finally(() => rm(scratch, { recursive: true, force: true }));
      const filled = await http.ask("POST", "/engines/builds", { reference: zeros.reference });
      expect(filled.status, filled.body).toBe(507);
      expect(filled.json().error).toMatchObject({ code: "insufficient_storage", message: expect.stringMatching(/^the engine store's disk filled while pulling .*:zeros: nothing of it is kept$/) });
    } finally {
      await stack.restart();
      await small.close();
    }
  });

  it("takes a build by the reference its pull took, the default registry written out: use, configure --engine, rm and ENGINE_DEFAULT", async () => {
    const cli = (...args: string[]) => llamadock(["--host", stack.url, ...args], {});
    // `<registry>/llamadock/llama-server:typed`, in the default registry: stored without it.
    const typed = (await publishBuild(stack.registry, "as-built", "typed", (folder) => writeFile(join(folder, "NOTES"), "typed"))).reference;
    expect(typed.startsWith(`${stack.registry.host}/`)).toBe(true);
    const pulled = await cli("engine", "pull", typed);
    expect(pulled.code, pulled.stderr).toBe(0);
    const used = await cli("engine", "use", typed);
    expect(used.code, used.stderr).toBe(0);
    expect(used.stdout).toMatch(/^Default engine: typed /);
    // Back to the setting's default (a choice kept in the store would win over ENGINE_DEFAULT below).
    expect((await http.ask("POST", "/engines/builds/default", { name: null })).status).toBe(200);
    const configured = await cli("configure", "ai/other", "--engine", typed);
    expect(configured.code, configured.stderr).toBe(0);
    expect((await http.ask("POST", "/engines/v1/chat/completions", chat("ai/other"))).status).toBe(200);
    expect((await http.ps()).find((r) => r.model_name === "ai/other:latest")).toMatchObject({ engine: "typed" });
    // Named by a model (as typed), it is not removed, even with no runner on it.
    expect((await http.ask("POST", "/engines/unload", { models: ["ai/other"] })).status).toBe(200);
    expect((await cli("engine", "rm", "typed")).stderr).toMatch(/engine typed is the default or a model's engine/);
    expect((await cli("configure", "ai/other", "--engine", "default")).code).toBe(0);
    await until(async () => (await http.ps()).every((r) => r.engine !== "typed"), "no runner on typed");
    try {
      await stack.restart({ ENGINE_DEFAULT: typed });
      const { builds } = (await http.ask("GET", "/engines/builds")).json() as { builds: { name: string; default: boolean }[] };
      expect(builds.find((b) => b.default)?.name).toBe("typed");
      expect((await http.ask("POST", "/engines/v1/chat/completions", chat("ai/other"))).status).toBe(200);
      expect((await http.ps()).find((r) => r.model_name === "ai/other:latest")).toMatchObject({ engine: "typed" });
    } finally {
      await stack.restart();
    }
    const removed = await cli("engine", "rm", typed);
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.stdout).toMatch(/^Removed typed \(sha256:/);
  });
});

describe.each(["node", "deno"] as const)("engines under %s", (runtime) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ runtime, models: ["ai/tiny", "ai/other"] });
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it("pulls a build, runs a model on it with a renamed flag spelled for it, and moves it to another", async () => {
    const http = api(stack);
    const v2 = (await publishBuild(stack.registry, "renamed", "v2")).reference;
    const v1 = (await publishBuild(stack.registry, "as-built", "v1")).reference;
    for (const reference of [v1, v2]) expect((await http.ask("POST", "/engines/builds", { reference })).status).toBe(201);
    expect((await http.configure({ model: "ai/tiny", engine: "v2", "runtime-flags": ["-cms", "4096"] })).status).toBe(202);
    expect((await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"))).status).toBe(200);
    expect(await stack.runnerLogs()).toMatch(/\(v2\): .*-cpent 4096/);
    expect((await http.configure({ model: "ai/tiny", engine: "v1" })).status).toBe(202);
    await until(async () => (await http.ps()).some((r) => r.engine === "v1" && r.state === "ready"), "the move to v1");
    await until(async () => (await http.ps()).length === 1, "the old runner to go");
    expect(await stack.runnerLogs()).toMatch(/\(v1\): .*-cms 4096/);
  });

  it("takes the default from DMR's LLAMA_SERVER_VERSION, pulling a build not yet there when first needed, once for callers at once", async () => {
    const http = api(stack);
    const v3 = await publishBuild(stack.registry, "as-built", "v3", (folder) => writeFile(join(folder, "NOTES"), "v3"));
    await stack.restart({ LLAMA_SERVER_VERSION: v3.reference });
    // Two callers need the default's build at once: a runner's launch and the status line.
    const [answer, status] = await Promise.all([http.ask("POST", "/engines/v1/chat/completions", chat("ai/other")), http.ask("GET", "/engines/status")]);
    expect(answer.status, answer.body).toBe(200);
    expect(status.status, status.body).toBe(200);
    // Stored, it is taken from the store from now on: the registry is not asked again (here it no
    // longer has the image), though the setting names it as written, not as its pull stored it.
    const gone = await fetch(`${stack.registry.url}/v2/llamadock/llama-server/manifests/${v3.digest}`, { method: "DELETE" });
    expect(gone.status).toBe(202);
    expect((await http.ps()).find((r) => r.model_name === "ai/other:latest")).toMatchObject({ engine: "v3" });
    expect((await http.ask("GET", "/engines/status")).json()["llama.cpp"]).toMatch(/^Running: llama\.cpp 0\.5\.0-dev .* \(engine v3\)$/);
    // A model that names its own build keeps it.
    expect((await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"))).status).toBe(200);
    expect((await http.ps()).find((r) => r.model_name === "ai/tiny:latest")).toMatchObject({ engine: "v1" });
    // "default" takes its own build away: it moves to the default engine, its setting gone.
    expect((await http.configure({ model: "ai/tiny", engine: "default" })).status).toBe(202);
    const onDefault = async () => (await http.ps()).filter((r) => r.model_name === "ai/tiny:latest").map((r) => `${r.engine} ${r.state}`).join();
    // No room here for a second runner: the one on v1 retires when idle, and the next load is on v3.
    await until(async () => !(await onDefault()).includes("v1"), "ai/tiny's runner on v1 to retire");
    expect((await http.ask("POST", "/engines/v1/chat/completions", chat("ai/tiny"))).status).toBe(200);
    expect(await onDefault()).toBe("v3 ready");
    const settings = (await http.ask("GET", "/engines/_configure?model=ai/tiny")).json();
    expect(JSON.stringify(settings)).not.toMatch(/"engine"/);
    // Stored once, told once, however many callers needed it since the restart.
    expect((await http.events()).filter((e) => e.kind === "pulled")).toEqual([expect.objectContaining({ engine: "v3", message: expect.stringContaining(v3.digest) })]);
  });

  it("lets only an admin key pull, choose, install, configure a model onto or remove builds; a plain key's call changes nothing; any key lists them", async () => {
    await writeFile(join(stack.dir, "keys"), "plain-key name=plain\nadmin-key name=boss admin\n");
    await stack.restart({ API_KEYS_FILE: join(stack.dir, "keys") });
    const as = (key: string) => (method: string, path: string, body?: object) => ask({ url: stack.url }, method, path, body, { authorization: `Bearer ${key}` });
    const [plain, admin] = [as("plain-key"), as("admin-key")];
    // What the builds and a model's settings are; the runners on each (they move on their own) left out.
    const state = async () => {
      const { default: chosen, builds } = (await admin("GET", "/engines/builds")).json() as { default: string; builds: { name: string; digest?: string; default: boolean }[] };
      return { chosen, builds: builds.map((b) => `${b.name} ${b.default}`), settings: (await admin("GET", "/engines/_configure?model=ai/tiny")).json() };
    };
    expect((await plain("GET", "/engines/builds")).status).toBe(200);
    const v4 = await publishBuild(stack.registry, "as-built", "v4", (folder) => writeFile(join(folder, "NOTES"), "v4"));
    const calls: [string, string, object | undefined, number][] = [
      ["POST", "/engines/builds", { reference: v4.reference }, 201],
      ["POST", "/engines/builds/default", { name: "v4" }, 200],
      ["POST", "/engines/_configure", { model: "ai/tiny", engine: "v1" }, 202],
      ["POST", "/engines/uninstall-backend", { backend: "llama.cpp" }, 200],
      ["POST", "/engines/install-backend", { backend: "llama.cpp", reference: v4.reference }, 200],
      ["POST", "/engines/builds/default", { name: null }, 200],
      ["DELETE", "/engines/builds/v4", undefined, 200],
    ];
    for (const [method, path, body, status] of calls) {
      const before = await state();
      const refused = await plain(method, path, body);
      expect(refused.status, path).toBe(403);
      expect(refused.json().error).toMatchObject({ type: "permission_error", code: "admin_only", message: expect.stringMatching(/ takes an admin key: /) });
      expect(await state(), `${method} ${path}`).toEqual(before);
      // The runners the default's changes moved are off v4 before it goes.
      if (method === "DELETE") await until(async () => ((await admin("GET", "/engines/ps")).json() as Ps).every((r) => r.engine !== "v4"), "no runner on v4");
      const allowed = await admin(method, path, body);
      expect(allowed.status, `${path}: ${allowed.body}`).toBe(status);
      expect(await state(), `${method} ${path}`).not.toEqual(before);
    }
  });
});

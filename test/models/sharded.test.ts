import { mkdtemp, readdir, readFile, readlink, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatSize } from "../../src/models/gguf.ts";
import { startRunnerService } from "../inference/harness.ts";
import { startFakeHub, type FakeHub } from "../support/fake-hub.ts";
import { ask } from "../support/http.ts";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { MODEL_MEDIA, pushModel, sha256, startRegistry, type Registry } from "../support/registry.ts";
import type { RuntimeName, ServerProcess } from "../support/server-process.ts";
import { shardName, tinyLlamaGguf, tinyLlamaShards } from "../support/tiny-gguf.ts";

// Weights split in several GGUF files, end to end: a real server (Bun) pulls them from a
// loopback fake of the Hugging Face Hub (every shard of the quantisation) and from a real
// registry (several GGUF layers in order), lists them with their summed size, estimates memory
// from all of them, and serves them with the real llama-server, which loads the first shard and
// finds the rest by name. The shards are the whole model cut where gguf-split cuts (same seed,
// same weights), so a greedy answer from them must equal the whole model's, token for token.

const SEED = 3;
const whole = tinyLlamaGguf({ seed: SEED });
const shards = tinyLlamaShards(3, { seed: SEED });
const shardBytes = shards.reduce((sum, s) => sum + s.byteLength, 0);
// On the Hub: another model (other weights, so that its shards are downloaded, not found in the store).
const HUB_SEED = 5;
const hubShards = tinyLlamaShards(3, { seed: HUB_SEED });

let registry: Registry;
let other: Uint8Array[];
let corrupting: Front;
let hub: FakeHub;
let dir: string;
let server: ServerProcess;
let url: string;

beforeAll(async () => {
  registry = await startRegistry();
  await pushModel(registry, "ai/whole", "latest", whole);
  await pushModel(registry, "ai/hub-whole", "latest", tinyLlamaGguf({ seed: HUB_SEED }));
  const rest = (list: Uint8Array[]) => list.map((data) => ({ mediaType: MODEL_MEDIA.gguf, data }));
  await pushModel(registry, "ai/split", "latest", shards[0]!, { layers: rest(shards.slice(1)) });
  // An artifact that lacks its last shard, one whose shards come out of order, one with a corrupt shard.
  await pushModel(registry, "ai/lacking", "latest", shards[0]!, { layers: rest(shards.slice(1, 2)) });
  await pushModel(registry, "ai/disordered", "latest", shards[0]!, { layers: rest([shards[2]!, shards[1]!]) });
  other = tinyLlamaShards(3, { seed: SEED + 1 });
  await pushModel(registry, "ai/corrupt", "latest", other[0]!, { layers: rest(other.slice(1)) });
  corrupting = await startRegistryFront(registry.url, { corruptBlob: sha256(other[1]!) });
  hub = await startFakeHub({
    "TestOrg/Split-GGUF": {
      ...Object.fromEntries(hubShards.map((data, i) => [`Q4_K_M/split-Q4_K_M-${shardName("x", i + 1, 3).slice(2)}`, data])),
      "split-Q8_0.gguf": tinyLlamaGguf({ seed: 8 }),
    },
    "TestOrg/Gap-GGUF": { [`gap-Q4_K_M-00001-of-00003.gguf`]: shards[0]!, [`gap-Q4_K_M-00003-of-00003.gguf`]: shards[2]! },
  });
  dir = await mkdtemp(join(tmpdir(), "llamadock-sharded-"));
  server = await startRunnerService("bun", dir, registry, { HF_ENDPOINT: hub.url, INFERENCE_MEMORY_BUDGET: "4GiB" });
  url = /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
});
afterAll(async () => {
  await server?.stop(10_000);
  await Promise.all([registry?.stop(), corrupting?.stop(), hub?.stop()]);
  if (dir) await rm(dir, { recursive: true, force: true });
});

type Line = { type: string; message: string; status?: number };
/** The pull's last progress line, or its error answer (refused before progress streams) as one. */
async function pull(from: string): Promise<Line> {
  const response = await fetch(`${url}/models/create`, { method: "POST", body: JSON.stringify({ from }) });
  if (response.status !== 200) return { type: "error", message: ((await response.json()) as { error: { message: string } }).error.message, status: response.status };
  const lines = (await response.text()).trim().split("\n").map((l) => JSON.parse(l) as Line);
  return lines.at(-1)!;
}

const greedy = async (model: string) => {
  const answer = await ask({ url }, "POST", "/engines/v1/completions", { model, prompt: "hello", max_tokens: 12, temperature: 0 });
  expect(answer.status, answer.body).toBe(200);
  return (answer.json() as { choices: { text: string }[] }).choices[0]!.text;
};

type Listed = { id: string; tags: string[]; config: { size: string; parameters: string } };
const model = async (name: string) => (await ask({ url }, "GET", `/models/${name}`)).json() as Listed;
const blobs = () => readdir(join(dir, "models", "blobs", "sha256"));

describe("sharded weights", () => {
  it("pull from a registry as GGUF layers in order: stored, listed with the summed size, served as the whole model", async () => {
    expect(await pull("ai/whole")).toMatchObject({ type: "success" });
    expect(await pull("ai/split")).toMatchObject({ type: "success" });
    const split = await model("ai/split");
    expect(split.config.size).toBe(formatSize(shardBytes));
    // Ollama's list counts every shard's bytes too.
    const tags = (await ask({ url }, "GET", "/api/tags")).json() as { models: { name: string; size: number }[] };
    expect(tags.models.find((m) => m.name === "ai/split:latest")?.size).toBe(shardBytes);
    // Every shard's parameters, not the first one's: as many as the whole model's.
    expect(split.config.parameters).toBe((await model("ai/whole")).config.parameters);
    for (const shard of shards) expect((await stat(join(dir, "models", "blobs", "sha256", sha256(shard).slice(7)))).size).toBe(shard.byteLength);

    const expected = await greedy("ai/whole");
    expect(await greedy("ai/split")).toBe(expected);
    // The runner was given the first of links named as llama.cpp finds shards, to the three blobs.
    const run = join(dir, "run");
    const folder = (await readdir(run)).find((n) => n.endsWith(".shards"))!;
    expect((await readdir(join(run, folder))).sort()).toEqual([1, 2, 3].map((i) => shardName("model", i, 3)));
    for (const [i, shard] of shards.entries()) expect(await readlink(join(run, folder, shardName("model", i + 1, 3)))).toMatch(new RegExp(`${sha256(shard).slice(7)}$`));
    const logs = await Promise.all((await readdir(join(dir, "logs"))).map((n) => readFile(join(dir, "logs", n), "utf8")));
    expect(logs.join("\n")).toContain(`--model ${join(run, folder, shardName("model", 1, 3))} `);
    const runners = (await ask({ url }, "GET", "/engines/ps")).json() as { model_name: string; memory: { weights_bytes: number } }[];
    const weights = (name: string) => runners.find((r) => r.model_name === `${name}:latest`)!.memory.weights_bytes;
    // The estimate counts every shard: within the shards' headers of the whole model's.
    expect(weights("ai/split")).toBeGreaterThanOrEqual(weights("ai/whole"));
    expect(weights("ai/split") / weights("ai/whole")).toBeLessThan(1.01);
    expect(weights("ai/split")).toBeGreaterThan(2 * shards[0]!.byteLength);
  });

  it("pull from Hugging Face takes every shard of the quantisation, and serves them", async () => {
    expect(await pull("hf.co/TestOrg/Split-GGUF")).toMatchObject({ type: "success" });
    for (const i of [1, 2, 3]) expect(hub.requests.filter((r) => r.startsWith("GET") && r.includes(`-0000${i}-of-00003.gguf`)).length).toBeGreaterThan(0);
    expect(hub.requests.some((r) => r.startsWith("GET") && r.includes("Q8_0"))).toBe(false);
    const hf = await model("hf.co/testorg/split-gguf");
    expect(hf.config).toMatchObject({ size: formatSize(hubShards.reduce((sum, s) => sum + s.byteLength, 0)), quantization: "Q4_K_M" });
    expect(await pull("ai/hub-whole")).toMatchObject({ type: "success" });
    expect(await greedy("hf.co/testorg/split-gguf")).toBe(await greedy("ai/hub-whole"));
  });

  it("refuses a shard missing, out of order or corrupt with a clear error, records nothing, and the store stays loadable", async () => {
    const before = (await ask({ url }, "GET", "/models")).json() as Listed[];
    expect(await pull("hf.co/TestOrg/Gap-GGUF")).toEqual({ type: "error", status: 404, message: "TestOrg/Gap-GGUF lacks shard 2 of 3 of gap-Q4_K_M (gap-Q4_K_M-00002-of-00003.gguf)" });
    expect(await pull("ai/lacking")).toMatchObject({ type: "error", message: expect.stringContaining("the weights come in 2 files, but their first says the model is split in 3") });
    expect(await pull("ai/disordered")).toMatchObject({ type: "error", message: expect.stringContaining("file 2 of the 3 split weight files is not shard 2 (its header says shard 3 of 3)") });
    expect(await pull(`${corrupting.host}/ai/corrupt`)).toMatchObject({ type: "error", message: expect.stringContaining(`downloaded content does not match its digest: expected ${sha256(other[1]!)}`) });
    expect(((await ask({ url }, "GET", "/models")).json() as Listed[]).map((m) => m.id).sort()).toEqual(before.map((m) => m.id).sort());
    expect(await greedy("ai/split")).toBe(await greedy("ai/whole"));
  });

  it("refuses a split model as a speculative draft (llama-server would not find its other files)", async () => {
    const answer = await ask({ url }, "POST", "/engines/_configure", { model: "ai/whole", speculative: { draft_model: "ai/split" } });
    expect(answer.status).toBe(400);
    expect(answer.json().error).toEqual({ type: "invalid_request_error", code: "unsupported_draft_model", message: "a draft model split in several files is not supported: ai/split" });
  });

  it("push sends every shard, in order: the registry holds the stored artifact byte for byte", async () => {
    const name = `${registry.host}/team/split:v1`;
    expect((await ask({ url }, "POST", `/models/ai/split/tag?repo=${encodeURIComponent(`${registry.host}/team/split`)}&tag=v1`)).status).toBe(201);
    const pushed = await fetch(`${url}/models/${name}/push`, { method: "POST" });
    expect((await pushed.text()).trim().split("\n").at(-1)).toBe(JSON.stringify({ type: "success", message: "Model pushed successfully", mode: "push" }));
    const stored = await readFile(join(dir, "models", "manifests", "sha256", (await model("ai/split")).id.slice(7)));
    const there = await fetch(`${registry.url}/v2/team/split/manifests/v1`, { headers: { accept: MODEL_MEDIA.manifest } });
    expect(Buffer.from(await there.arrayBuffer()).equals(stored)).toBe(true);
    const layers = (JSON.parse(stored.toString()) as { layers: { digest: string }[] }).layers.map((l) => l.digest);
    expect(layers).toEqual(shards.map(sha256));
    for (const shard of shards) {
      const blob = await fetch(`${registry.url}/v2/team/split/blobs/${sha256(shard)}`);
      expect(Buffer.from(await blob.arrayBuffer()).equals(Buffer.from(shard))).toBe(true);
    }
  });

  it("delete takes every shard, and the other models stay loadable", async () => {
    await ask({ url }, "POST", "/engines/unload", { all: true });
    // By id, forced: every tag (the pushed one too), then the model.
    expect((await ask({ url }, "DELETE", `/models/${(await model("ai/split")).id}?force=true`)).status).toBe(200);
    for (const shard of shards) expect(await blobs()).not.toContain(sha256(shard).slice(7));
    expect(await greedy("hf.co/testorg/split-gguf")).toBe(await greedy("ai/hub-whole"));
    await ask({ url }, "POST", "/engines/unload", { all: true });
    // A shard lost from the store's disk (by hand, not by us): the load fails saying which file, and the rest serves.
    await rm(join(dir, "models", "blobs", "sha256", sha256(hubShards[1]!).slice(7)));
    const lost = await ask({ url }, "POST", "/engines/v1/completions", { model: "hf.co/testorg/split-gguf", prompt: "hello", max_tokens: 3 });
    expect(lost.status).toBe(503);
    expect(lost.json().error).toMatchObject({ code: "model_load_failed", message: expect.stringContaining(`${sha256(hubShards[1]!).slice(7)} is gone: the model was deleted, or the file removed (pull the model again)`) });
    expect((await ask({ url }, "POST", "/engines/v1/completions", { model: "ai/whole", prompt: "hello", max_tokens: 3 })).status).toBe(200);
    expect((await ask({ url }, "DELETE", "/models/hf.co/testorg/split-gguf")).status).toBe(200);
    for (const shard of hubShards) expect(await blobs()).not.toContain(sha256(shard).slice(7));
    // The runners' links went with them.
    expect((await readdir(join(dir, "run"))).filter((n) => n.endsWith(".shards"))).toEqual([]);
  });
});

describe.each<RuntimeName>(["node", "deno"])("on %s", (runtime) => {
  it("pulls a split model and serves it as the whole one", async () => {
    const own = await mkdtemp(join(tmpdir(), `llamadock-sharded-${runtime}-`));
    let smoke: ServerProcess | undefined;
    try {
      smoke = await startRunnerService(runtime, own, registry, {});
      const at = /model runner service listening on (http:\/\/[\d.:]+)/.exec(smoke.output())![1]!;
      for (const from of ["ai/whole", "ai/split"]) {
        const response = await fetch(`${at}/models/create`, { method: "POST", body: JSON.stringify({ from }) });
        expect(await response.text()).toContain("Model pulled successfully");
      }
      const answers = [];
      for (const name of ["ai/whole", "ai/split"]) {
        const answer = await ask({ url: at }, "POST", "/engines/v1/completions", { model: name, prompt: "hello", max_tokens: 12, temperature: 0 });
        expect(answer.status, answer.body).toBe(200);
        answers.push(answer.json().choices[0].text);
      }
      expect(answers[1]).toBe(answers[0]);
    } finally {
      await smoke?.stop(10_000);
      await rm(own, { recursive: true, force: true });
    }
  });
});

import { mkdir, mkdtemp, readFile, rm, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageModel } from "../../src/models/package/archive.ts";
import { startRunnerService, startStack, type Stack } from "../inference/harness.ts";
import { call, modelApi, pull } from "../models/helpers.ts";
import { ask } from "../support/http.ts";
import { MODEL_MEDIA, pushModel, sha256, startRegistry, type Registry } from "../support/registry.ts";
import type { RuntimeName, ServerProcess } from "../support/server-process.ts";
import { shardName, tinyLlamaGguf, tinyLlamaShards } from "../support/tiny-gguf.ts";
import { llamadock } from "./command.ts";

// package, push, purge and df as users run them: the command against a real model runner (Bun),
// a real registry to push to, real llama-server runners serving what was packaged. Then a smoke
// run of the same API on Node and Deno.

let stack: Stack;
let target: Registry;
let dir: string;
let env: Record<string, string>;
const weights = tinyLlamaGguf({ seed: 77 });
const MANIFEST = "application/vnd.oci.image.manifest.v1+json";

beforeAll(async () => {
  [stack, target, dir] = await Promise.all([startStack({ models: ["ai/tiny"] }), startRegistry(), mkdtemp(join(tmpdir(), "llamadock-publish-"))]);
  await writeFile(join(dir, "tiny.gguf"), weights);
  await writeFile(join(dir, "other.gguf"), tinyLlamaGguf({ seed: 78 }));
  await writeFile(join(dir, "not.gguf"), "plain text\n");
  // A model whose weights are no GGUF: its pull downloads them, then fails, and leaves them.
  await pushModel(target, "ai/junk", "latest", new Uint8Array(200_000).fill(3));
  env = { MODEL_RUNNER_SOCK: stack.socket };
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  await target?.stop();
  await rm(dir, { recursive: true, force: true });
});

const chat = (model: string) =>
  ask({ url: stack.url }, "POST", "/engines/v1/chat/completions", { model, messages: [{ role: "user", content: "hi" }], max_tokens: 3 });

describe("llamadock package, push", () => {
  it("package makes a model from a GGUF file: it lists, it serves a chat, it pushes, and it pulls back the same", async () => {
    const packaged = await llamadock(["package", join(dir, "tiny.gguf"), "--tag", "me/packaged"], env);
    expect(packaged.stderr).toBe("");
    expect(packaged.code).toBe(0);
    expect(packaged.stdout).toMatch(/^([0-9a-f]{12}: .*\n)*Model packaged as me\/packaged:latest \([0-9a-f]{12}, 1 weights file\)\n$/);
    const model = (await ask({ url: stack.url }, "GET", "/models/me/packaged")).json();
    expect(model.config).toMatchObject({ format: "gguf", architecture: "llama" });
    expect((await llamadock(["ls"], env)).stdout).toMatch(new RegExp(`^me/packaged:latest\\s+${model.id.slice(7, 19)}\\s`, "m"));

    const answer = await chat("me/packaged");
    expect(answer.status).toBe(200);
    expect(answer.json().choices[0].message.role).toBe("assistant");

    const name = `${target.host}/team/packaged:v1`;
    expect((await llamadock(["tag", "me/packaged", name], env)).code).toBe(0);
    const pushed = await llamadock(["push", name], env);
    expect(pushed).toMatchObject({ code: 0, stderr: "" });
    expect(pushed.stdout).toMatch(/[0-9a-f]{12}: .* \(100%\) done\nModel pushed successfully\n$/);

    const fresh = await modelApi();
    try {
      expect((await pull(fresh.handler, { from: name })).lines.at(-1)).toMatchObject({ type: "success" });
      expect((await call(fresh.handler, "GET", `/models/${name}`)).json.id).toBe(model.id);
      expect(sha256(await readFile(fresh.store.layout.blob(sha256(weights))))).toBe(sha256(weights));
    } finally {
      await fresh.dispose();
    }
  });

  it("package takes a split model by its first shard, finds the rest by name, and the runner serves it; a projector comes after the shards", async () => {
    const shards = tinyLlamaShards(3, { seed: 79 });
    const split = join(dir, "split");
    await mkdir(split);
    for (const [i, shard] of shards.entries()) await writeFile(join(split, shardName("tiny", i + 1, 3)), shard);
    const packaged = await llamadock(["package", join(split, shardName("tiny", 1, 3)), "--tag", "me/split"], env);
    expect(packaged.stderr).toBe("");
    expect(packaged.stdout).toMatch(/Model packaged as me\/split:latest \([0-9a-f]{12}, 3 weights files\)\n$/);
    const stored = (await ask({ url: stack.url }, "GET", "/models/me/split")).json();
    const manifest = async (id: string) => JSON.parse(await readFile(join(stack.dir, "models", "manifests", "sha256", id.slice(7)), "utf8"));
    expect((await manifest(stored.id)).layers.map((l: { digest: string }) => l.digest)).toEqual(shards.map(sha256));
    const answer = await chat("me/split");
    expect(answer.status).toBe(200);
    expect(answer.json().choices[0].message.role).toBe("assistant");

    await writeFile(join(split, "mmproj.gguf"), weights);
    const withProjector = await llamadock(["package", join(split, shardName("tiny", 1, 3)), "--mmproj", join(split, "mmproj.gguf"), "--tag", "me/split-vision"], env);
    expect(withProjector.stderr).toBe("");
    const vision = (await ask({ url: stack.url }, "GET", "/models/me/split-vision")).json();
    const layers = (await manifest(vision.id)).layers.map((l: { digest: string; mediaType: string }) => [l.digest, l.mediaType]);
    expect(layers).toEqual([...shards.map((s) => [sha256(s), MODEL_MEDIA.gguf]), [sha256(weights), MODEL_MEDIA.mmproj]]);

    await rm(join(split, shardName("tiny", 2, 3)));
    const lacking = await llamadock(["package", join(split, shardName("tiny", 1, 3)), "--tag", "me/lacking"], env);
    expect(lacking.code).toBe(1);
    expect(lacking.stderr).toContain(`${join(split, shardName("tiny", 2, 3))} is missing: shard 2 of the 3 files of tiny`);
  });

  it("package --push packages and pushes in one go", async () => {
    const name = `${target.host}/team/direct:v1`;
    const done = await llamadock(["package", join(dir, "other.gguf"), "--tag", name, "--push"], env);
    expect(done.code).toBe(0);
    expect(done.stdout).toContain(`Model packaged as ${name}`);
    expect(done.stdout).toMatch(/Model pushed successfully\n$/);
    // The registry serves an OCI manifest only to a client that accepts one.
    const manifest = await fetch(`${target.url}/v2/team/direct/manifests/v1`, { method: "HEAD", headers: { accept: MANIFEST } });
    expect(manifest.status).toBe(200);
  });

  it("sends an archive larger than Bun's own body cap (128 MiB), which once answered 413", async () => {
    const license = join(dir, "LICENSE-large");
    await writeFile(license, "");
    await truncate(license, 130 << 20); // sparse: zeros that cost no disk here
    const done = await llamadock(["package", join(dir, "tiny.gguf"), "--license", license, "--tag", "me/large"], env);
    expect(done.stderr).toBe("");
    expect(done.stdout).toMatch(/Model packaged as me\/large:latest/);
    const stored = (await ask({ url: stack.url }, "GET", "/models/me/large")).json();
    const manifest = JSON.parse(await readFile(join(stack.dir, "models", "manifests", "sha256", stored.id.slice(7)), "utf8"));
    expect(manifest.layers.map((l: { size: number }) => l.size)).toEqual([weights.byteLength, 130 << 20]);
  });

  it("refuses a file that is no GGUF, a model the store lacks, a registry it cannot reach: status 1 and why", async () => {
    const bad = await llamadock(["package", join(dir, "not.gguf"), "--tag", "me/bad"], env);
    expect(bad).toMatchObject({ code: 1, stdout: "" });
    expect(bad.stderr).toBe(`llamadock: ${join(dir, "not.gguf")} is not a GGUF file (it does not begin with "GGUF")\n`);
    const unknown = await llamadock(["push", `${target.host}/team/absent:v1`], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain(`model ${target.host}/team/absent:v1 not found`);
    await llamadock(["tag", "ai/tiny", "127.0.0.1:9/team/nowhere:v1"], env);
    const unreachable = await llamadock(["push", "127.0.0.1:9/team/nowhere:v1"], env);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(/^llamadock: cannot reach the registry 127\.0\.0\.1:9/);
    await llamadock(["rm", "127.0.0.1:9/team/nowhere:v1"], env);
  });
});

describe("llamadock df, purge", () => {
  it("df shows what a failed pull left as reclaimable; purge frees it and keeps every model", async () => {
    const failed = await llamadock(["pull", `${target.host}/ai/junk`], env);
    expect(failed.code).toBe(1);
    const df = await llamadock(["df"], env);
    expect(df.stdout).toMatch(/^Reclaimable \(llamadock purge --older-than 0\)\s+200\.\d\d kB$/m);
    const before = (await ask({ url: stack.url }, "GET", "/engines/df")).json();
    expect(before.reclaimable_disk_usage).toBeGreaterThan(200_000);

    const purged = await llamadock(["purge"], env);
    expect(purged.code).toBe(0);
    expect(purged.stdout).toBe(`Freed ${(before.reclaimable_disk_usage / 1000).toFixed(2)} kB (2 files)\n`);
    const after = (await ask({ url: stack.url }, "GET", "/engines/df")).json();
    expect(after).toMatchObject({ reclaimable_disk_usage: 0, incomplete_downloads_disk_usage: 0 });
    expect(after.models_disk_usage).toBe(before.models_disk_usage - before.reclaimable_disk_usage);
    expect((await chat("ai/tiny")).status).toBe(200);
  });

  it("purge --all deletes every model, stopping the runners that serve them, and the store is empty", async () => {
    expect((await chat("ai/tiny")).status).toBe(200);
    expect((await ask({ url: stack.url }, "GET", "/engines/ps")).json().length).toBeGreaterThan(0);
    const models = (await ask({ url: stack.url }, "GET", "/models")).json() as { id: string }[];
    const purged = await llamadock(["purge", "--all", "--json"], env);
    expect(purged.code).toBe(0);
    const report = JSON.parse(purged.stdout);
    expect(report.deleted.map((m: { id: string }) => m.id).sort()).toEqual(models.map((m) => m.id).sort());
    expect(report.freed_bytes).toBeGreaterThan(weights.byteLength);
    expect((await ask({ url: stack.url }, "GET", "/models")).json()).toEqual([]);
    expect((await ask({ url: stack.url }, "GET", "/engines/ps")).json()).toEqual([]);
    expect((await chat("ai/tiny")).status).toBe(404);
    expect((await llamadock(["df"], env)).stdout).toMatch(/^Models\s+\d+ B$/m);
  });
});

describe.each<RuntimeName>(["node", "deno"])("on %s", (runtime) => {
  it("loads a packaged archive, pushes it, and purges it", async () => {
    const runDir = await mkdtemp(join(tmpdir(), `llamadock-publish-${runtime}-`));
    let server: ServerProcess | undefined;
    try {
      server = await startRunnerService(runtime, runDir, target, {});
      const url = /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
      const pkg = await packageModel({ weights: [join(dir, "tiny.gguf")] });
      // The server's default registry is the target: names on it leave the host out.
      const name = `smoke/${runtime}:v1`;
      const loaded = await fetch(`${url}/models/load?tag=${encodeURIComponent(name)}`, {
        method: "POST",
        headers: { "content-type": "application/x-tar", "content-length": String(pkg.size) },
        body: pkg.archive(),
        duplex: "half",
      } as RequestInit);
      expect(loaded.status).toBe(200);
      expect(await loaded.json()).toMatchObject({ id: pkg.artifact.id, tags: [name] });
      const pushed = await fetch(`${url}/models/${name}/push`, { method: "POST" });
      expect((await pushed.text()).trim().split("\n").at(-1)).toBe(JSON.stringify({ type: "success", message: "Model pushed successfully", mode: "push" }));
      const manifest = await fetch(`${target.url}/v2/smoke/${runtime}/manifests/v1`, { headers: { accept: MANIFEST } });
      expect(sha256(new Uint8Array(await manifest.arrayBuffer()))).toBe(pkg.artifact.id);
      const purged = await fetch(`${url}/models/purge`, { method: "DELETE" });
      expect(await purged.json()).toMatchObject({ deleted: [{ id: pkg.artifact.id, tags: [name] }] });
    } finally {
      await server?.stop(10_000);
      await rm(runDir, { recursive: true, force: true });
    }
  });
});

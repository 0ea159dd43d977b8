import { mkdtemp, readdir, rm, stat, utimes } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createModelStore } from "../../src/models/index.ts";
import { ask } from "../support/http.ts";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { pushModel, sha256, startRegistry, type PushedModel, type Registry } from "../support/registry.ts";
import { startReplica } from "../support/replica.ts";
import type { RuntimeName, ServerProcess } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// Purge on a store that another server shares (replicas on one volume): real server processes on
// one MODELS_PATH. What the other serves (its runner's weights) and what it is pulling (an
// incomplete download, however old) stays until it lets them go; only then a purge frees them.

let registry: Registry;
let stalling: Front;
let tiny: PushedModel;
const big = tinyLlamaGguf({ seed: 9 });
let dir: string;
const servers: ServerProcess[] = [];

beforeAll(async () => {
  registry = await startRegistry();
  tiny = await pushModel(registry, "ai/tiny", "latest", tinyLlamaGguf());
  await pushModel(registry, "ai/big", "latest", big);
  // Every blob GET through it sends 100 kB, then nothing: a pull that stays running.
  stalling = await startRegistryFront(registry.url, { stallBlobsAfter: 100_000 });
});
afterAll(async () => {
  await Promise.all([registry?.stop(), stalling?.stop()]);
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.stop(10_000)));
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function replica(name: string, runtime: RuntimeName, registryHost: string): Promise<string> {
  const { url, server } = await startReplica(dir, name, runtime, registryHost);
  servers.push(server);
  return url;
}

const chat = (url: string, model: string) =>
  ask({ url }, "POST", "/engines/v1/chat/completions", { model, messages: [{ role: "user", content: "hi" }], max_tokens: 3 });

describe("purge on a store another server shares", () => {
  it("keeps the blob the other serves and the download it is pulling, and frees both once it lets them go", async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-shared-purge-"));
    const [a, b] = await Promise.all([replica("a", "node", registry.host), replica("b", "bun", stalling.host)]);
    const pulled = await fetch(`${a}/models/create`, { method: "POST", body: JSON.stringify({ from: "ai/tiny" }) });
    expect(await pulled.text()).toContain("Model pulled successfully");
    expect((await chat(b, "ai/tiny")).status).toBe(200); // b's runner now serves the weights

    const layout = createModelStore(join(dir, "models")).layout;
    const client = new AbortController();
    const running = fetch(`${b}/models/create`, { method: "POST", body: JSON.stringify({ from: "ai/big" }), signal: client.signal }).then((r) => r.text()).catch(() => "");
    const partial = layout.incompleteBlob(sha256(big));
    await until(async () => (await stat(partial).then((s) => s.size, () => 0)) === 100_000, "b's download to stall");
    const past = new Date(Date.now() - 2 * 3600_000);
    await utimes(partial, past, past);

    const all = await ask({ url: a }, "DELETE", "/models/purge");
    expect(all.status).toBe(200);
    const report = all.json() as { deleted: unknown[]; freed_bytes: number; incomplete_bytes: number };
    expect(report.deleted).toEqual([{ id: tiny.manifestDigest, tags: ["ai/tiny:latest"] }]);
    expect(report.incomplete_bytes).toBe(0);
    // The weights b serves are kept (and marked), as is b's download; what went is not counted as freed.
    expect((await stat(layout.blob(tiny.ggufDigest))).size).toBe(tiny.size);
    expect((await stat(partial)).size).toBe(100_000);
    expect(report.freed_bytes).toBeLessThan(tiny.size);
    const unused = await ask({ url: a }, "DELETE", "/models/purge?unused=true&older-than=0");
    expect(unused.json()).toMatchObject({ removed_files: 0, freed_bytes: 0, incomplete_bytes: 0 });
    expect((await ask({ url: a }, "GET", "/engines/df")).json()).toMatchObject({ reclaimable_disk_usage: 0 });

    // b lets both go: its runner unloaded, its pull's client gone.
    expect((await ask({ url: b }, "POST", "/engines/unload", { all: true })).json()).toEqual({ unloaded_runners: 1 });
    client.abort();
    await running;
    await until(async () => !(await readdir(layout.blobsDir)).includes(tiny.ggufDigest.slice(7)), "b to remove the weights it kept");
    let freed = 0;
    await until(async () => {
      const answer = (await ask({ url: a }, "DELETE", "/models/purge?unused=true&older-than=0")).json() as { freed_bytes: number; incomplete_bytes: number };
      freed += answer.freed_bytes;
      return answer.incomplete_bytes === 100_000;
    }, "b's download freed once its pull ended");
    expect(await readdir(layout.blobsDir)).toEqual([]);
    expect(freed).toBeGreaterThanOrEqual(100_000);
  });
});

import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdir, readdir, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { thisProcess } from "../../src/models/store/owner.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { inTerminal, llamadock } from "../cli/command.ts";
import { publishBuild } from "../support/engine-builds.ts";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { startReplica, type Replica } from "../support/replica.ts";

// An engine pull's progress: NDJSON lines in the models' shape for a client that asks, from a real
// registry behind a front that slows each connection (a layer of several MB then takes more than
// one progress line, and a second caller has time to join) or cuts it in the middle of the layer;
// and `llamadock engine pull` drawing them, in a pipe and on a terminal. A purge meanwhile leaves the
// pulls in progress alone, this server's and a replica's on the same store.

type Line = { type: string; message: string; total?: number; layer?: { id: string; size: number; current: number }; [field: string]: unknown };

/** A build of its own digest (a file of `tag`'s beside the binary): each pull of it downloads its layer. */
const publishFresh = (stack: Stack, tag: string) => publishBuild(stack.registry, "as-built", tag, (folder) => writeFile(join(folder, "NOTES"), tag));

describe("engine pulls with progress", () => {
  let stack: Stack;
  let front: Front;
  beforeAll(async () => {
    stack = await startStack({ models: [] });
    // About 1.5 s for the setup's build (a 6 MB layer gzipped): progress every 100 ms.
    front = await startRegistryFront(stack.registry.url, { bytesPerSecond: 4_000_000 });
  }, 120_000);
  afterAll(async () => {
    await front?.stop();
    await stack?.stop();
  });

  const via = (reference: string, to: Front) => reference.replace(stack.registry.host, to.host);
  const post = (path: string, body: object, headers: Record<string, string> = {}) =>
    fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const linesOf = async (response: Response): Promise<Line[]> => (await response.text()).trim().split("\n").map((l) => JSON.parse(l) as Line);

  it("streams each layer's bytes as they arrive, to two callers of one pull, then the build as a success line", async () => {
    const published = await publishFresh(stack, "streamed");
    const reference = via(published.reference, front);
    const first = await post("/engines/builds?stream=true", { reference });
    expect([first.status, first.headers.get("content-type")]).toEqual([201, "application/x-ndjson"]);
    // The first caller's layer is still coming: the second joins its pull.
    const second = await post("/engines/builds", { reference }, { accept: "application/x-ndjson" });
    for (const lines of [await linesOf(first), await linesOf(second)]) {
      const progress = lines.filter((l) => l.type === "progress");
      expect(progress.length).toBeGreaterThan(1);
      expect(progress.every((l) => l.layer?.id === published.layer.digest && l.layer.size === published.layer.size && l.total === published.layer.size)).toBe(true);
      const bytes = progress.map((l) => l.layer!.current);
      expect(bytes).toEqual([...bytes].sort((a, b) => a - b));
      expect(bytes.at(-1)).toBe(published.layer.size);
      expect(lines.at(-1)).toMatchObject({ type: "success", mode: "pull", name: "streamed", digest: published.digest, version: expect.stringMatching(/^0\.5\.0-dev/) });
      expect(lines.filter((l) => l.type !== "progress")).toHaveLength(1);
    }
    // Both callers' answers came from one pull: one build stored, told once.
    const events = (await (await fetch(`${stack.url}/engines/builds/events`)).json()) as { kind: string; engine: string }[];
    expect(events.filter((e) => e.kind === "pulled" && e.engine === "streamed")).toHaveLength(1);
    // DMR's install-backend streams too when asked; a build already there downloads nothing.
    const installed = await post("/engines/install-backend?stream=true", { backend: "llama.cpp", reference });
    expect(await linesOf(installed)).toEqual([expect.objectContaining({ type: "success", backend: "llama.cpp", installed: "streamed", digest: published.digest })]);
    expect((await post("/engines/builds/default", { name: null })).status).toBe(200);
  });

  it("keeps a refusal found before downloading as its status and JSON, and ends with an error line when the registry cuts the layer", async () => {
    const missing = await post("/engines/builds?stream=true", { reference: `${front.host}/llamadock/llama-server:absent` });
    expect(missing.status).toBe(404);
    expect(missing.headers.get("content-type")).toMatch(/^application\/json/);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toMatch(/not_found/);
    const published = await publishFresh(stack, "cut");
    const cutting = await startRegistryFront(stack.registry.url, { cutBlobsAfter: 1_000_000, bytesPerSecond: 4_000_000 });
    try {
      const answer = await post("/engines/builds?stream=true", { reference: via(published.reference, cutting) });
      expect(answer.status).toBe(201);
      const lines = await linesOf(answer);
      expect(lines.filter((l) => l.type === "progress").length).toBeGreaterThan(0);
      // The registry's failure, named with the layer it cut, as the JSON answer would have said it (502).
      expect(lines.at(-1)).toMatchObject({ type: "error", mode: "pull", error: { type: "upstream_error", code: "pull_failed" } });
      expect(lines.at(-1)!.message).toMatch(new RegExp(`^layer ${published.layer.digest} ended after \\d+ of its ${published.layer.size} bytes: `));
    } finally {
      await cutting.stop();
    }
    const { builds } = (await (await fetch(`${stack.url}/engines/builds`)).json()) as { builds: { name: string }[] };
    expect(builds.map((b) => b.name)).not.toContain("cut");
  });

  it("draws the progress with `llamadock engine pull`, as lines in a pipe and as a bar on a terminal, then the build", async () => {
    const piped = await publishFresh(stack, "piped");
    const inPipe = await llamadock(["--host", stack.url, "engine", "pull", via(piped.reference, front)], {});
    expect(inPipe.code, inPipe.stderr).toBe(0);
    const lines = inPipe.stdout.trim().split("\n");
    const layer = piped.layer.digest.slice(7, 19);
    expect(lines.length).toBeGreaterThan(2);
    expect(lines.slice(0, -1).every((l) => new RegExp(`^${layer}: [\\d.]+ [kMG]?B / [\\d.]+ [kMG]?B \\(\\d+%\\)( done)?$`).test(l))).toBe(true);
    expect(lines.at(-2)).toMatch(/\(100%\) done$/);
    expect(lines.at(-1)).toMatch(new RegExp(`^Pulled piped: llama-server 0\\.5\\.0-dev.* \\(\\w+, ${piped.digest}\\)$`));
    const termed = await publishFresh(stack, "termed");
    const onTerminal = await inTerminal(["--host", stack.url, "engine", "pull", via(termed.reference, front)], {});
    expect(onTerminal.code, onTerminal.stdout).toBe(0);
    expect(onTerminal.stdout.split(/\r|\n/).some((l) => new RegExp(`${termed.layer.digest.slice(7, 19)} \\[█{12}\\] 100% `).test(l))).toBe(true);
    expect(onTerminal.stdout).toContain("\x1b[?25l");
    expect(onTerminal.stdout).toMatch(/Pulled termed: llama-server 0\.5\.0-dev/);
  });
});

describe("engine pulls in progress and a purge", () => {
  let stack: Stack;
  let front: Front;
  let replica: Replica | undefined;
  beforeAll(async () => {
    stack = await startStack({ models: [] });
    front = await startRegistryFront(stack.registry.url, { bytesPerSecond: 2_000_000 });
  }, 120_000);
  afterAll(async () => {
    await replica?.server.stop(10_000);
    await front?.stop();
    await stack?.stop();
  });

  const engines = () => join(stack.dir, "models", "engines");
  const pull = (url: string, reference: string) =>
    fetch(`${url}/engines/builds?stream=true`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ reference: reference.replace(stack.registry.host, front.host) }) });
  const lastLine = async (response: Response) => JSON.parse((await response.text()).trim().split("\n").at(-1)!) as Line;
  const purge = async () => {
    const purged = await fetch(`${stack.url}/models/purge?unused=true&older-than=0`, { method: "DELETE" });
    expect(purged.status).toBe(200);
  };

  it("leaves this process's pull and a replica's on the same store to finish, and takes what a process that is gone left", async () => {
    replica = await startReplica(stack.dir, "replica", "bun", stack.registry.host);
    const [here, there] = [await publishFresh(stack, "here"), await publishFresh(stack, "there")];
    // Each answer begins once its layer starts downloading: about 3 s at this pace.
    const [pullingHere, pullingThere] = await Promise.all([pull(stack.url, here.reference), pull(replica.url, there.reference)]);
    expect([pullingHere.status, pullingThere.status]).toEqual([201, 201]);
    expect((await readdir(engines())).filter((f) => f.startsWith(".incoming-"))).toHaveLength(2);
    // Left by pulls whose process is gone: one that named its process (an exited pid), one older than any heartbeat.
    const exited = spawn("true");
    await once(exited, "exit");
    await mkdir(join(engines(), ".incoming-exited"));
    await writeFile(join(engines(), ".incoming-exited", "owner.json"), JSON.stringify({ ...thisProcess(), pid: exited.pid, token: "gone" }));
    await mkdir(join(engines(), ".incoming-old"));
    const longAgo = new Date(Date.now() - 3_600_000);
    await utimes(join(engines(), ".incoming-old"), longAgo, longAgo);
    await purge();
    expect((await readdir(engines())).filter((f) => f.startsWith(".incoming-"))).toHaveLength(2);
    expect(await lastLine(pullingHere)).toMatchObject({ type: "success", name: "here", digest: here.digest });
    expect(await lastLine(pullingThere)).toMatchObject({ type: "success", name: "there", digest: there.digest });
    const { builds } = (await (await fetch(`${stack.url}/engines/builds`)).json()) as { builds: { name: string }[] };
    expect(builds.map((b) => b.name).sort()).toEqual(["builtin", "here", "there"]);
    expect((await readdir(engines())).filter((f) => f.startsWith(".incoming-"))).toEqual([]);
  });
});

describe.each(["node", "deno"] as const)("engine pull progress under %s", (runtime) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ runtime, models: [] });
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it("streams the layer's progress to its size, then the build", async () => {
    const published = await publishFresh(stack, runtime);
    const answer = await fetch(`${stack.url}/engines/builds?stream=true`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ reference: published.reference }) });
    expect([answer.status, answer.headers.get("content-type")]).toEqual([201, "application/x-ndjson"]);
    const lines = (await answer.text()).trim().split("\n").map((l) => JSON.parse(l) as Line);
    expect(lines.filter((l) => l.type === "progress").at(-1)?.layer).toEqual({ id: published.layer.digest, size: published.layer.size, current: published.layer.size });
    expect(lines.at(-1)).toMatchObject({ type: "success", name: runtime, digest: published.digest });
  });
});

import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSupervisor, runnerSpec, type Sidecar, type Supervisor } from "../../../sidecar/index.ts";
import { readGgufConfig } from "../../../src/models/gguf.ts";
import { estimateMemory, shapeOf, type Estimate } from "../../../src/scheduler/memory/estimate.ts";
import { writeTinyLlamaGguf, type TinyGgufOptions } from "../../support/tiny-gguf.ts";
import { runnersOn, sidecarWorld, type SidecarWorld } from "../../sidecar/harness.ts";

// The host prompt cache against the real llama-server: a runner launched with the flags the
// scheduler gives it (--cache-ram, --ctx-checkpoints) is sent many distinct long prompts, each
// saved to its cache when the next one takes the slot, until the cache is past its limit and
// drops the oldest. Its resident memory (/proc VmRSS of the llama-server process) grows by no
// more than the estimate's prompt cache, and a second runner beside it by no more than its own
// estimate: what the scheduler counts is what the runners hold. Growth is counted from each
// runner's memory after one short request (the process itself and its touched buffers).

const MIB = 1024 * 1024;
const CACHE = { bytes: 24 * MIB, checkpoints: 4 };
// 4 KiB of KV cache a token: a 3000-token prompt is about 12 MiB of saved state.
const SHAPE: TinyGgufOptions = { embedding: 256, heads: 4, layers: 4, feedForward: 512, context: 4096 };
const SLOTS = 2;
const CONTEXT = 8192;
const PROMPTS = 12;
const PROMPT_TOKENS = 3000;

let world: SidecarWorld;
let supervisor: Supervisor;

const rssOf = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;

/** A prompt of byte tokens that shares no prefix with another seed's. */
const prompt = (seed: number) => Array.from({ length: PROMPT_TOKENS }, (_, i) => String.fromCharCode(97 + ((seed * 7 + i * (seed + 3)) % 26))).join("");

type Launched = { sidecar: Sidecar; estimate: Estimate; pid: number; base: number };

async function launch(name: string): Promise<Launched> {
  const path = join(world.dir, `${name}.gguf`);
  await writeTinyLlamaGguf(path, SHAPE);
  const bytes = (await readFile(path)).length;
  const config = await readGgufConfig(path, bytes);
  const estimate = estimateMemory(shapeOf(config.gguf ?? {})!, bytes, { contextSize: CONTEXT, slots: SLOTS, promptCache: CACHE });
  // The spec the scheduler would launch: the cache flags come from the same launch settings.
  const spec = runnerSpec({ id: name, ggufPath: path }, "completion", {}, { slots: SLOTS, threads: 1, contextSize: CONTEXT, alias: name, promptCache: CACHE }, 1);
  const sidecar = await supervisor.start(spec);
  const [pid] = runnersOn(sidecar.socketPath);
  expect(pid).toBe(sidecar.pid);
  await complete(sidecar, "warm up");
  return { sidecar, estimate, pid: sidecar.pid, base: rssOf(sidecar.pid) };
}

async function complete(sidecar: Sidecar, text: string): Promise<void> {
  const answer = await sidecar.fetch("http://runner/completion", { method: "POST", body: JSON.stringify({ prompt: text, n_predict: 1 }) });
  expect(answer.status).toBe(200);
  await answer.text();
}

/** The sizes of the prompts llama-server dropped from its full cache to make room, as its log tells. */
async function dropped(sidecar: Sidecar): Promise<number[]> {
  const log = await readFile(join(world.logDir, `${sidecar.name}.log`), "utf8");
  return [...log.matchAll(/making room for prompt cache entry, removing oldest entry \(size = ([\d.]+) MiB\)/g)].map((m) => Number(m[1]) * MIB);
}

let first: Launched;
let second: Launched | undefined;
let filled: number;
beforeAll(async () => {
  world = await sidecarWorld();
  supervisor = createSupervisor({ ...world, readyTimeoutMs: 60_000, stopGraceMs: 3_000 });
  first = await launch("first");
  for (let seed = 0; seed < PROMPTS; seed++) await complete(first.sidecar, prompt(seed));
  filled = rssOf(first.pid);
}, 240_000);
afterAll(async () => {
  await Promise.all([first?.sidecar.stop(), second?.sidecar.stop()]);
  await world?.remove();
});

describe("the host prompt cache against llama-server", () => {
  it("fills to its limit and drops the oldest prompts", async () => {
    // The short warm-up prompt is among them: the long ones are the conversations.
    const sizes = (await dropped(first.sidecar)).filter((size) => size > MIB);
    console.log(`dropped ${sizes.length} long prompts of ${(sizes[0]! / MIB).toFixed(2)} MiB from a cache of ${CACHE.bytes / MIB} MiB`);
    // Each prompt was saved when the next took its slot; the cache held two and dropped the rest.
    expect(sizes.length).toBeGreaterThanOrEqual(PROMPTS - 4);
    // A saved prompt is its tokens' KV cache: 4 KiB a token here.
    for (const size of sizes) expect(size / (PROMPT_TOKENS * 4096)).toBeCloseTo(1, 1);
  });

  it("grows the runner's resident memory by no more than the estimate's prompt cache (10%)", () => {
    const growth = filled - first.base;
    console.log(`RSS ${(first.base / MIB).toFixed(1)} -> ${(filled / MIB).toFixed(1)} MiB: growth ${(growth / MIB).toFixed(1)} MiB, estimated cache ${(first.estimate.promptCache / MIB).toFixed(1)} MiB (ratio ${(growth / first.estimate.promptCache).toFixed(3)})`);
    expect(growth).toBeGreaterThan(CACHE.bytes / 2);
    expect(growth).toBeLessThanOrEqual(1.1 * first.estimate.promptCache);
  });

  it("leaves room for a second runner within the two estimates", async () => {
    second = await launch("second");
    await complete(second.sidecar, prompt(100));
    const used = rssOf(first.pid) - first.base + (rssOf(second.pid) - second.base);
    const counted = first.estimate.promptCache + second.estimate.promptCache;
    console.log(`both runners: growth ${(used / MIB).toFixed(1)} MiB, estimated caches ${(counted / MIB).toFixed(1)} MiB`);
    expect(used).toBeLessThanOrEqual(1.1 * counted);
  });
});

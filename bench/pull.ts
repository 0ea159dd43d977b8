import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, open, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pushModel, startRegistry } from "../test/support/registry.ts";
import { startServer, type RuntimeName } from "../test/support/server-process.ts";
import { tinyLlamaGguf } from "../test/support/tiny-gguf.ts";

// Pull throughput: a 1 GiB model artifact from a local docker-registry, pulled by our model
// runner (streamed to disk, sha256 checked on the way) versus `curl` downloading the same blob
// to disk, in alternating rounds of the same run. Also our server's peak RSS (VmHWM).
//
//   npm run bench:pull        (BENCH_MIB size, BENCH_ROUNDS rounds, BENCH_RUNTIMES e.g. bun,node)

const mib = Number(process.env.BENCH_MIB ?? 1024);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const runtimes = (process.env.BENCH_RUNTIMES ?? "bun,node").split(",") as RuntimeName[];

/** A valid GGUF header (so the store can describe the model) padded with random bytes to `mib` MiB. */
async function writeBigModel(path: string): Promise<{ path: string; size: number; digest: string }> {
  const file = await open(path, "w");
  const hash = createHash("sha256");
  const head = tinyLlamaGguf();
  const chunk = randomBytes(16 << 20);
  let size = 0;
  const write = async (bytes: Uint8Array) => {
    hash.update(bytes);
    await file.write(bytes);
    size += bytes.byteLength;
  };
  await write(head);
  const total = mib << 20;
  while (size < total) await write(chunk.subarray(0, Math.min(chunk.byteLength, total - size)));
  await file.close();
  return { path, size, digest: `sha256:${hash.digest("hex")}` };
}

function curl(url: string, output: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn("curl", ["-sSf", "-o", output, url], { stdio: ["ignore", "ignore", "inherit"] });
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve((performance.now() - started) / 1000) : reject(new Error(`curl exited ${code}`))));
  });
}

async function peakRssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? NaN) / 1024;
}

async function ourPull(runtime: RuntimeName, registryHost: string, dir: string): Promise<{ seconds: number; rssMiB: number }> {
  const models = join(dir, `models-${runtime}`);
  await rm(models, { recursive: true, force: true });
  const server = await startServer({
    runtime,
    env: { SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: "none", MODELS_PATH: models, DEFAULT_REGISTRY: registryHost },
    ...(runtime === "deno" ? { runtimeArgs: ["--allow-net", "--allow-env", "--allow-sys=homedir", `--allow-read=${dir},.`, `--allow-write=${dir}`] } : {}),
  });
  try {
    const url = /listening on (http:\/\/[\d.]+:\d+)/.exec(server.output())![1]!;
    const started = performance.now();
    const response = await fetch(`${url}/models/create`, { method: "POST", body: JSON.stringify({ from: "ai/big" }) });
    const text = await response.text();
    const seconds = (performance.now() - started) / 1000;
    if (!text.includes("Model pulled successfully")) throw new Error(`pull failed: ${text.slice(-500)}`);
    return { seconds, rssMiB: await peakRssMiB(server.pid) };
  } finally {
    await server.stop(5_000);
    await rm(models, { recursive: true, force: true });
  }
}

/** sha256 throughput of one core here: a pull that checks its digest cannot run faster than this. */
function sha256GiBPerSecond(): number {
  const data = randomBytes(64 << 20);
  const hash = createHash("sha256");
  const started = performance.now();
  for (let pass = 0; pass < 8; pass += 1) hash.update(data);
  hash.digest();
  return 0.5 / ((performance.now() - started) / 1000);
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function main() {
  const dir = await mkdtemp(join(tmpdir(), "llamadock-bench-pull-"));
  const registry = await startRegistry();
  try {
    const blob = await writeBigModel(join(dir, "model.gguf"));
    const pushed = await pushModel(registry, "ai/big", "latest", blob);
    await rm(blob.path);
    const blobUrl = `${registry.url}/v2/ai/big/blobs/${pushed.ggufDigest}`;
    const gib = blob.size / (1 << 30);
    console.log(`blob: ${(blob.size / (1 << 20)).toFixed(0)} MiB, ${rounds} alternating rounds`);
    const curlSeconds: number[] = [];
    const ours = new Map<RuntimeName, { seconds: number[]; rss: number[] }>(runtimes.map((r) => [r, { seconds: [], rss: [] }]));
    for (let round = 0; round < rounds; round += 1) {
      const output = join(dir, "curl.blob");
      curlSeconds.push(await curl(blobUrl, output));
      if ((await stat(output)).size !== blob.size) throw new Error("curl downloaded the wrong size");
      await rm(output);
      for (const runtime of runtimes) {
        const result = await ourPull(runtime, registry.host, dir);
        ours.get(runtime)!.seconds.push(result.seconds);
        ours.get(runtime)!.rss.push(result.rssMiB);
      }
    }
    const curlRate = gib / median(curlSeconds);
    const hashRate = sha256GiBPerSecond();
    console.log(`curl to disk:        ${curlRate.toFixed(2)} GiB/s (median of ${curlSeconds.map((s) => s.toFixed(2)).join(", ")} s)`);
    console.log(`sha256 on one core:  ${hashRate.toFixed(2)} GiB/s: the ceiling of a checked pull, ratio ${(hashRate / curlRate).toFixed(2)} at most`);
    for (const [runtime, figures] of ours) {
      const rate = gib / median(figures.seconds);
      console.log(
        `llamadock on ${runtime.padEnd(5)}: ${rate.toFixed(2)} GiB/s (median of ${figures.seconds.map((s) => s.toFixed(2)).join(", ")} s), ` +
          `ratio ${(rate / curlRate).toFixed(2)} (target >= 0.9), peak RSS ${Math.max(...figures.rss).toFixed(0)} MiB (target < 150)`,
      );
    }
  } finally {
    await registry.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();

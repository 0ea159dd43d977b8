import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, open, readFile, rm, stat } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { cpuMicros, statFields } from "./cpu.ts";
import { join } from "node:path";
import { DEFAULT_PART_SETTINGS, splitBlob } from "../src/models/store/parts.ts";
import { startRegistryFront } from "../test/support/registry-front.ts";
import { pushModel, startRegistry, type Registry } from "../test/support/registry.ts";
import { startServer, type RuntimeName } from "../test/support/server-process.ts";
import { tinyLlamaGguf } from "../test/support/tiny-gguf.ts";

// Pull throughput: a 1 GiB model artifact from a local docker-registry, pulled by our model
// runner (streamed to disk, sha256 checked on the way) versus `curl` downloading the same blob
// to disk, in alternating rounds of the same run. Also our server's peak RSS (VmHWM).
//
// Then over a WAN-like path: a loopback front that caps each connection at BENCH_CAP_MIB MiB/s
// (40) serves the same blob, pulled in one stream (PULL_PARTS=1), in parallel ranged parts (our
// default), and by `curl --parallel` fetching the same ranges as many at once. Those ratios are
// printed last.
//
//   npm run bench:pull        (BENCH_MIB size, BENCH_ROUNDS rounds, BENCH_RUNTIMES e.g. bun,node,
//                              BENCH_CAP_MIB per-connection cap, BENCH_CAPPED_RUNTIME: bun)

const mib = Number(process.env.BENCH_MIB ?? 1024);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
// Empty: only the capped comparison.
const runtimes = (process.env.BENCH_RUNTIMES ?? "bun,node").split(",").filter(Boolean) as RuntimeName[];
const capMiB = Number(process.env.BENCH_CAP_MIB ?? 40);
const cappedRuntime = (process.env.BENCH_CAPPED_RUNTIME ?? "bun") as RuntimeName;
const cores = availableParallelism();

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

function curl(args: string[], command = "curl", stdout?: (text: string) => void): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    // curl's own errors are its exit status; its stderr would carry the parallel progress meter.
    const child = spawn(command, args, { stdio: ["ignore", stdout ? "pipe" : "ignore", "ignore"] });
    child.stdout?.on("data", (chunk: Buffer) => stdout?.(chunk.toString()));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve((performance.now() - started) / 1000) : reject(new Error(`curl exited ${code}`))));
  });
}

/** A process's resident memory now (`VmRSS`) or at its peak (`VmHWM`), in MiB. */
async function rssMiB(pid: number, which: "VmRSS" | "VmHWM"): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(new RegExp(`${which}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN) / 1024;
}

/** curl with `args`, run through a shell that then reads its child's CPU time (cutime, cstime) from /proc. */
async function curlTimed(args: string[]): Promise<{ seconds: number; cpu: number }> {
  let procStat = "";
  const seconds = await curl(["-c", 'curl "$@" && cat /proc/$$/stat', "sh", ...args], "sh", (text) => (procStat += text));
  const fields = statFields(procStat);
  return { seconds, cpu: (Number(fields[13]) + Number(fields[14])) / 100 }; // cutime, cstime: ticks of 10 ms
}

/** `curl --parallel` fetching the ranges our pull asks for, as many at once, each into a file of its own. */
async function curlParallel(url: string, size: number, dir: string): Promise<{ seconds: number; cpu: number }> {
  const parts = splitBlob(size, DEFAULT_PART_SETTINGS) ?? [{ start: 0, end: size }];
  const args = ["--silent", "--parallel", "--parallel-max", String(DEFAULT_PART_SETTINGS.streams)];
  parts.forEach((part, i) => args.push(...(i > 0 ? ["--next"] : []), "-sSf", "-r", `${part.start}-${part.end - 1}`, "-o", join(dir, `part${i}`), url));
  const timed = await curlTimed(args);
  let total = 0;
  for (let i = 0; i < parts.length; i += 1) {
    total += (await stat(join(dir, `part${i}`))).size;
    await rm(join(dir, `part${i}`));
  }
  if (total !== size) throw new Error(`curl --parallel downloaded ${total} bytes, not ${size}`);
  return timed;
}

/** `idleMiB`: the server's resident memory just before the pull; `rssMiB`: its peak (start included). */
async function ourPull(runtime: RuntimeName, registryHost: string, dir: string, env: Record<string, string> = {}): Promise<{ seconds: number; rssMiB: number; idleMiB: number; cpu: number }> {
  const models = join(dir, `models-${runtime}`);
  await rm(models, { recursive: true, force: true });
  const server = await startServer({
    runtime,
    env: { SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: "none", MODELS_PATH: models, DEFAULT_REGISTRY: registryHost, ...env },
    ...(runtime === "deno" ? { runtimeArgs: ["--allow-net", "--allow-env", "--allow-sys=homedir", `--allow-read=${dir},.`, `--allow-write=${dir}`] } : {}),
  });
  try {
    const url = /listening on (http:\/\/[\d.]+:\d+)/.exec(server.output())![1]!;
    const idleMiB = await rssMiB(server.pid, "VmRSS");
    const started = performance.now();
    const cpuBefore = cpuMicros(server.pid) / 1e6;
    const response = await fetch(`${url}/models/create`, { method: "POST", body: JSON.stringify({ from: "ai/big" }) });
    const text = await response.text();
    const seconds = (performance.now() - started) / 1000;
    if (!text.includes("Model pulled successfully")) throw new Error(`pull failed: ${text.slice(-500)}`);
    return { seconds, rssMiB: await rssMiB(server.pid, "VmHWM"), idleMiB, cpu: cpuMicros(server.pid) / 1e6 - cpuBefore };
  } finally {
    await server.stop(5_000);
    await rm(models, { recursive: true, force: true });
  }
}

/**
 * sha256 throughput of one core here: a pull that checks its digest cannot run faster than this.
 * Hashed 1 MiB at a time, as the pull's hashing threads do, from the cache: one buffer much larger
 * than the cache runs at the memory's pace instead (1.1 GiB/s here against 1.8).
 */
function sha256GiBPerSecond(): number {
  const data = randomBytes(1 << 20);
  const hash = createHash("sha256");
  const started = performance.now();
  for (let pass = 0; pass < 512; pass += 1) hash.update(data);
  hash.digest();
  return 0.5 / ((performance.now() - started) / 1000);
}

/**
 * What a pull may add to the server's memory: the old bound of 150 MiB peak, less the 60 MiB a Bun
 * server holds at idle. Judged as an increase because Node's idle server alone holds about 125 MiB
 * (its type stripping of our TypeScript included: the same code bundled as JavaScript holds about
 * 40 MiB less), which no pull can give back.
 */
const PULL_OWN_MIB = 90;

/**
 * Today's comparison: the blob from the registry itself, as fast as loopback goes, vs curl to disk.
 * Judged for the pull's memory only: curl neither hashes nor flushes, and on a machine with few
 * cores the hash's CPU alone keeps a checked pull below curl. So beside curl it prints the bound of
 * a checked pull here: the cores divided by what a GiB costs at least (curl's CPU, the registry's,
 * a hash).
 */
async function uncapped(registry: Registry, digest: string, size: number, dir: string): Promise<void> {
  const gib = size / (1 << 30);
  const registryCpu = () => cpuMicros(registry.process.pid) / 1e6;
  const blobUrl = `${registry.url}/v2/ai/big/blobs/${digest}`;
  console.log(`blob: ${(size / (1 << 20)).toFixed(0)} MiB, ${rounds} alternating rounds, ${cores} cores`);
  // The registry's first read of the blob (from the disk, not the page cache) took 1.5-1.9 s
  // against 0.65 later, and made whichever side came first look slow: it is done once before.
  await curlTimed(["-sSf", "-o", "/dev/null", blobUrl]);
  const curls: { seconds: number; cpu: number; registry: number }[] = [];
  const ours = new Map<RuntimeName, { seconds: number; rssMiB: number; idleMiB: number; cpu: number; registry: number }[]>(runtimes.map((r) => [r, []]));
  for (let round = 0; round < rounds; round += 1) {
    const output = join(dir, "curl.blob");
    let before = registryCpu();
    const timed = await curlTimed(["-sSf", "-o", output, blobUrl]);
    curls.push({ ...timed, registry: registryCpu() - before });
    if ((await stat(output)).size !== size) throw new Error("curl downloaded the wrong size");
    await rm(output);
    for (const runtime of runtimes) {
      before = registryCpu();
      const result = await ourPull(runtime, registry.host, dir);
      ours.get(runtime)!.push({ ...result, registry: registryCpu() - before });
    }
  }
  const perGiB = (seconds: number[]) => median(seconds) / gib;
  const curlRate = 1 / perGiB(curls.map((c) => c.seconds));
  const [curlCpu, curlRegistry] = [perGiB(curls.map((c) => c.cpu)), perGiB(curls.map((c) => c.registry))];
  const hashRate = sha256GiBPerSecond();
  const bound = Math.min(hashRate, cores / (curlCpu + curlRegistry + 1 / hashRate));
  console.log(`curl to disk:        ${curlRate.toFixed(2)} GiB/s (median of ${curls.map((c) => c.seconds.toFixed(2)).join(", ")} s; CPU s/GiB: curl ${curlCpu.toFixed(2)}, registry ${curlRegistry.toFixed(2)})`);
  console.log(`sha256 on one core:  ${hashRate.toFixed(2)} GiB/s (${(1 / hashRate).toFixed(2)} CPU s/GiB)`);
  console.log(`a checked pull's bound: ${bound.toFixed(2)} GiB/s (${cores} cores / the CPU s/GiB of curl, registry and sha256), ratio ${(bound / curlRate).toFixed(2)} of curl at most`);
  for (const [runtime, runs] of ours) {
    const rate = 1 / perGiB(runs.map((r) => r.seconds));
    console.log(
      `llamadock on ${runtime.padEnd(5)}: ${rate.toFixed(2)} GiB/s (median of ${runs.map((r) => r.seconds.toFixed(2)).join(", ")} s; ` +
        `CPU s/GiB: ours ${perGiB(runs.map((r) => r.cpu)).toFixed(2)}, registry ${perGiB(runs.map((r) => r.registry)).toFixed(2)}), ` +
        `ratio ${(rate / curlRate).toFixed(2)} of curl, ${(rate / bound).toFixed(2)} of the bound; peak RSS ${Math.max(...runs.map((r) => r.rssMiB)).toFixed(0)} MiB ` +
        `(idle ${Math.min(...runs.map((r) => r.idleMiB)).toFixed(0)}), the pull's own ${Math.max(...runs.map((r) => r.rssMiB - r.idleMiB)).toFixed(0)} MiB (target < ${PULL_OWN_MIB})`,
    );
  }
}

/** The same blob through a front that caps each connection's bandwidth: one stream, our parts, curl's. */
async function capped(registryUrl: string, digest: string, size: number, dir: string): Promise<void> {
  const front = await startRegistryFront(registryUrl, { bytesPerSecond: capMiB << 20 });
  try {
    const url = `${front.url}/v2/ai/big/blobs/${digest}`;
    const gib = size / (1 << 30);
    console.log(`\ncapped at ${capMiB} MiB/s per connection, ${DEFAULT_PART_SETTINGS.streams} streams, ${rounds} alternating rounds, llamadock on ${cappedRuntime}`);
    const single = await ourPull(cappedRuntime, front.host, dir, { PULL_PARTS: "1" });
    const curls: { seconds: number; cpu: number }[] = [];
    const ours: { seconds: number; rssMiB: number; cpu: number }[] = [];
    for (let round = 0; round < rounds; round += 1) {
      curls.push(await curlParallel(url, size, dir));
      ours.push(await ourPull(cappedRuntime, front.host, dir));
    }
    const oursRate = gib / median(ours.map((o) => o.seconds));
    const curlRate = gib / median(curls.map((c) => c.seconds));
    const singleRate = gib / single.seconds;
    const perGiB = (o: { cpu: number }) => (o.cpu / gib).toFixed(2);
    console.log(`one stream:          ${(singleRate * 1024).toFixed(0)} MiB/s (${single.seconds.toFixed(2)} s, peak RSS ${single.rssMiB.toFixed(0)} MiB, ${perGiB(single)} CPU s/GiB)`);
    console.log(`curl --parallel:     ${(curlRate * 1024).toFixed(0)} MiB/s (median of ${curls.map((c) => c.seconds.toFixed(2)).join(", ")} s; ${curls.map(perGiB).join(", ")} CPU s/GiB)`);
    console.log(`llamadock parts:     ${(oursRate * 1024).toFixed(0)} MiB/s (median of ${ours.map((o) => o.seconds.toFixed(2)).join(", ")} s; ${ours.map(perGiB).join(", ")} CPU s/GiB)`);
    console.log(`ratio parts / one stream:      ${(oursRate / singleRate).toFixed(2)} (target >= 4)`);
    console.log(`ratio parts / curl --parallel: ${(oursRate / curlRate).toFixed(2)} (target >= 0.9)`);
    console.log(`peak RSS, parts:               ${Math.max(...ours.map((o) => o.rssMiB)).toFixed(0)} MiB (target < 150)`);
  } finally {
    await front.stop();
  }
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function main() {
  const dir = await mkdtemp(join(tmpdir(), "llamadock-bench-pull-"));
  let registry: Registry | undefined;
  try {
    registry = await startRegistry();
    const blob = await writeBigModel(join(dir, "model.gguf"));
    const pushed = await pushModel(registry, "ai/big", "latest", blob);
    await rm(blob.path);
    if (runtimes.length > 0) await uncapped(registry, pushed.ggufDigest, blob.size, dir);
    await capped(registry.url, pushed.ggufDigest, blob.size, dir);
  } finally {
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();

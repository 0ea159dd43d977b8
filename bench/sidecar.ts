import { join } from "node:path";
import { buildLlamaServerArgs } from "../sidecar/args.ts";
import { launchEnv } from "../sidecar/binary.ts";
import { createSupervisor, type RunnerSpec } from "../sidecar/index.ts";
import { removeSocket } from "../src/runtime/socket-file.ts";
import { sidecarWorld } from "../test/sidecar/harness.ts";
import { median } from "./stats.ts";

// Spawn-to-ready of the tiny model: our supervisor (stale-socket check, log, pid file, growing
// poll interval) against the floor: llama-server spawned by hand, /health polled every 1 ms.
// Rounds alternate the two so that drift on a shared machine hits both alike.
//
//   npm run bench:sidecar   (BENCH_ROUNDS, BENCH_FLOOR_INTERVAL_MS; target: at most 50 ms above the floor)

const rounds = Number(process.env.BENCH_ROUNDS ?? 10);
const floorIntervalMs = Number(process.env.BENCH_FLOOR_INTERVAL_MS ?? 1);
const world = await sidecarWorld();
const { runtime, binary, runDir, logDir, modelPath } = world;
const supervisor = createSupervisor({ runtime, binary, runDir, logDir });
const spec: RunnerSpec = { name: "bench", modelPath, mode: "completion" };

async function floor(): Promise<number> {
  const socketPath = join(runDir, "floor.sock");
  const args = buildLlamaServerArgs({ ...spec, name: "floor" }, socketPath);
  const began = performance.now();
  const child = await runtime.spawn(binary.path, args, { env: launchEnv(binary.path, process.env) });
  // Its output is read and dropped: left unread, a full pipe would stall llama-server.
  void child.stdout.pipeTo(new WritableStream()).catch(() => {});
  void child.stderr.pipeTo(new WritableStream()).catch(() => {});
  const fetchRunner = runtime.unixFetch(socketPath);
  let exit: unknown;
  void child.exited.then((e) => (exit = e));
  for (;;) {
    if (exit) throw new Error(`llama-server exited before ready: ${JSON.stringify(exit)}`);
    const status = await fetchRunner("http://runner/health").then((r) => (r.body?.cancel(), r.status), () => 0);
    if (status === 200) break;
    // 1 ms, not 0: a pure spin takes the CPU from the llama-server it waits for. Even 1 ms costs
    // it some (it answers every 503), so on a busy machine this floor can come out slower.
    await new Promise((resolve) => setTimeout(resolve, floorIntervalMs));
  }
  const elapsed = performance.now() - began;
  child.kill("SIGTERM");
  await child.exited;
  removeSocket(socketPath);
  return elapsed;
}

async function supervised(): Promise<number> {
  const began = performance.now();
  const sidecar = await supervisor.start(spec);
  const elapsed = performance.now() - began;
  await sidecar.stop();
  return elapsed;
}

const times = { floor: [] as number[], supervisor: [] as number[] };
await floor(); // warm the page cache and the binary's libraries
for (let round = 0; round < rounds; round++) {
  const order = round % 2 ? (["supervisor", "floor"] as const) : (["floor", "supervisor"] as const);
  for (const which of order) times[which].push(which === "floor" ? await floor() : await supervised());
}
await world.remove();

const f = median(times.floor);
const s = median(times.supervisor);
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
console.log(`llama-server ${binary.version} on ${runtime.name} ${runtime.version}, tiny model, ${rounds} rounds`);
console.log(`spawn-to-ready median   floor (hand spawn, /health every ${floorIntervalMs} ms): ${fmt(f)}`);
console.log(`spawn-to-ready median   supervisor.start():                      ${fmt(s)}`);
console.log(`difference ${fmt(s - f)} (target <= 50 ms), ratio ${(s / f).toFixed(2)}x the floor`);

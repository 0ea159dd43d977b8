import { link, mkdtemp, open, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createFileStore } from "../src/batches/files.ts";
import { startServer, type ServerProcess } from "../test/support/server-process.ts";

// What batches cost the server's memory: the model runner under Bun (as `npm start` runs it) with
// two keys, each owning a BENCH_MIB MiB input of BENCH_LINES lines; BENCH_BATCHES batches over
// them (half each key's), the server restarted once half the lines have ended, run to their end.
// The lines name a model that is not there, so each fails fast with 404 through the real inference
// path: the engine is what is measured, not generation. VmRSS and VmHWM of the server are sampled
// every 100 ms throughout (/proc/<pid>/status).
//
// The inputs are put in the file store before the server starts (as FileStore keeps them: record
// and data), so that what the upload of 2 x 200 MiB costs does not hide what the batches cost.
//
//   npm run bench:batches     (BENCH_MIB 200, BENCH_LINES 50000, BENCH_BATCHES 20; BENCH_RUNNING
//                              sets BATCHES_RUNNING; BENCH_ENTRY runs another copy's src/index.ts)

const mib = Number(process.env.BENCH_MIB ?? 200);
const lineCount = Number(process.env.BENCH_LINES ?? 50_000);
const batchCount = Number(process.env.BENCH_BATCHES ?? 20);
const running = process.env.BENCH_RUNNING;
const entry = process.env.BENCH_ENTRY;
const KEYS = [
  { key: "sk-bench-alice-7d1e", name: "alice" },
  { key: "sk-bench-bob-42c9", name: "bob" },
];

/** An input of `lineCount` chat lines, each padded so that the file is `mib` MiB. */
async function writeInput(path: string): Promise<void> {
  const lineBytes = Math.floor((mib << 20) / lineCount);
  const file = await open(path, "w");
  let pending: string[] = [];
  for (let i = 0; i < lineCount; i++) {
    const line = { custom_id: `r${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "ai/absent", messages: [{ role: "user", content: "" }], max_tokens: 8 } };
    const bare = JSON.stringify(line).length + 1;
    line.body.messages[0]!.content = "x".repeat(Math.max(0, lineBytes - bare));
    pending.push(`${JSON.stringify(line)}\n`);
    if (pending.length === 256) {
      await file.write(pending.join(""));
      pending = [];
    }
  }
  await file.write(pending.join(""));
  await file.close();
}

type Sample = { at: number; rss: number; hwm: number; phase: string };
const samples: Sample[] = [];
let phase = "idle";

async function status(pid: number): Promise<{ rss: number; hwm: number } | undefined> {
  const text = await readFile(`/proc/${pid}/status`, "utf8").catch(() => undefined);
  if (!text) return undefined;
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0) / 1024;
  return { rss: field("VmRSS"), hwm: field("VmHWM") };
}

function sampleEvery100ms(server: () => ServerProcess): () => void {
  const began = performance.now();
  const timer = setInterval(() => {
    void status(server().pid).then((s) => s && samples.push({ at: (performance.now() - began) / 1000, ...s, phase }));
  }, 100);
  return () => clearInterval(timer);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "llamadock-bench-batches-"));
  let server: ServerProcess | undefined;
  try {
    console.log(`writing two inputs of ${mib} MiB, ${lineCount} lines each...`);
    const files = createFileStore(join(dir, "batches", "files"));
    await writeInput(join(dir, "input.jsonl"));
    await link(join(dir, "input.jsonl"), join(dir, "input-2.jsonl"));
    const inputs = new Map<string, string>();
    for (const [i, { name }] of KEYS.entries()) {
      const record = await files.adopt(join(dir, i === 0 ? "input.jsonl" : "input-2.jsonl"), { filename: "input.jsonl", purpose: "batch", owner: name });
      inputs.set(name, record.id);
    }
    await writeFile(join(dir, "keys"), KEYS.map((k) => `${k.key} name=${k.name}\n`).join(""));
    const env = {
      SERVICES: "runner",
      RUNNER_PORT: "0",
      RUNNER_SOCKET: "none",
      API_KEYS_FILE: join(dir, "keys"),
      MODELS_PATH: join(dir, "models"),
      INFERENCE_RUNTIME_DIR: join(dir, "run"),
      INFERENCE_LOG_DIR: join(dir, "logs"),
      INFERENCE_SETTINGS_PATH: join(dir, "engine-settings.json"),
      BATCHES_PATH: join(dir, "batches"),
      // Each batch holds its input's size again on its key's file quota until it ends: ten of
      // 200 MiB are past the default 2 GiB. What is measured here is memory, not the quota.
      KEY_MAX_FILE_BYTES: "0",
      ...(running ? { BATCHES_RUNNING: running } : {}),
    };
    const launch = async () => {
      server = await startServer({ runtime: "bun", env, ...(entry ? { entry } : {}), ready: [/model runner service listening on http:\/\/[\d.]+:\d+/] });
      return /model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!;
    };
    let url = await launch();
    const stopSampling = sampleEvery100ms(() => server!);
    const call = async (key: string, method: string, path: string, body?: object) => {
      const response = await fetch(`${url}${path}`, { method, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, ...(body ? { body: JSON.stringify(body) } : {}) });
      const json = (await response.json()) as any;
      if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
      return json;
    };
    type Counts = { status: string; request_counts: { total: number; completed: number; failed: number } };
    const all = async (): Promise<Counts[]> => (await Promise.all(KEYS.map(async (k) => (await call(k.key, "GET", "/v1/batches")).data as Counts[]))).flat();
    const linesEnded = (batches: Counts[]) => batches.reduce((n, b) => n + b.request_counts.completed + b.request_counts.failed, 0);
    const ended = (b: Counts) => ["completed", "failed", "cancelled", "expired"].includes(b.status);

    await sleep(2000);
    const idle = (await status(server!.pid))!.rss;
    phase = "running";
    const began = performance.now();
    for (let i = 0; i < batchCount; i++) {
      const { key, name } = KEYS[i % KEYS.length]!;
      await call(key, "POST", "/v1/batches", { input_file_id: inputs.get(name), endpoint: "/v1/chat/completions", completion_window: "24h" });
    }
    const total = batchCount * lineCount;
    for (let seen = 0; linesEnded(await all()) < total / 2; seen++) {
      await sleep(1000);
      if (seen % 10 === 0) console.log(`${linesEnded(await all())} of ${total} lines ended`);
    }
    const beforeRestart = Math.max(...samples.map((s) => s.hwm));
    console.log("restarting the server in the middle...");
    phase = "restart";
    await server!.stop(30_000);
    url = await launch();
    phase = "resumed";
    for (let seen = 0; !(await all()).every(ended); seen++) {
      await sleep(1000);
      if (seen % 10 === 0) console.log(`${linesEnded(await all())} of ${total} lines ended`);
    }
    const seconds = (performance.now() - began) / 1000;
    const finals = await all();
    phase = "after";
    await sleep(3000);
    const after = (await status(server!.pid))!.rss;
    stopSampling();

    const peakOf = (p: string) => Math.max(0, ...samples.filter((s) => s.phase === p).map((s) => s.hwm));
    const resumedPeak = peakOf("resumed");
    const peak = Math.max(beforeRestart, resumedPeak);
    const statuses = finals.reduce<Record<string, number>>((n, b) => ((n[b.status] = (n[b.status] ?? 0) + 1), n), {});
    const figures = {
      inputMiB: mib,
      linesPerBatch: lineCount,
      batches: batchCount,
      running: running ?? "default",
      statuses,
      linesEnded: linesEnded(finals),
      seconds: +seconds.toFixed(1),
      idleMiB: +idle.toFixed(1),
      peakMiB: +peak.toFixed(1),
      peakBeforeRestartMiB: +beforeRestart.toFixed(1),
      peakAfterRestartMiB: +resumedPeak.toFixed(1),
      afterMiB: +after.toFixed(1),
      perBatchMiB: +((peak - idle) / batchCount).toFixed(2),
      samples: samples.length,
    };
    console.log(JSON.stringify(figures, null, 2));
  } finally {
    await server?.stop(10_000);
    await rm(dir, { recursive: true, force: true });
  }
}

await main();

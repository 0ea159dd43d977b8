import { cpuMicros, threadMicros, threadSplit } from "./cpu.ts";
import autocannon from "autocannon";
import { startServer, type ServerProcess } from "../test/support/server-process.ts";

// The album service's overhead: load, over loopback, (1) a fixed 50-photo upstream directly,
// (2) a bare Bun proxy in front of it (fetch + wrap, nothing else), (3) the contract's floor: the
// bare proxy plus the abort, timeout, field dropping and 64-bit ids that the contract asks of any
// implementation, and (4) our album service on Bun in front of it. The target compares (4) with
// (3), what any implementation of the contract must do (0.95 of its req/s, p99 at most 1 ms over
// it), printed last; (2) shows what the contract itself costs. Targets are measured in alternating
// rounds, so that drift on a shared machine hits them alike. Latencies are taken per response, in
// fractions of a millisecond. On Linux it also prints the CPU time each server spent per request,
// which others' load on a shared machine disturbs far less than req/s.
//
//   npm run bench:album       (BENCH_SECONDS, BENCH_ROUNDS, BENCH_CONNECTIONS tune it)

const seconds = Number(process.env.BENCH_SECONDS ?? 5);
// Five rounds: the album service and the floor differ by 2-4 µs of CPU per album, and with three
// the ratio of one run moved enough (0.944-0.981 over thirteen runs) to miss now and then.
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const connections = Number(process.env.BENCH_CONNECTIONS ?? 10);

type Target = { name: string; url: string; pid: number };
type Figures = { requests: number; seconds: number; latencies: number[]; errors: number; cpuMicros: number; threads: Map<string, number> };

const addressOf = (server: ServerProcess) => {
  const url = /listening on (http:\/\/[\d.]+:\d+)/.exec(server.output())?.[1];
  if (!url) throw new Error(`no address in:\n${server.output()}`);
  return url;
};


function load({ url, pid }: Target, duration: number, figures?: Figures): Promise<void> {
  const cpuBefore = cpuMicros(pid);
  const threadsBefore = threadMicros(pid);
  return new Promise((resolve, reject) => {
    const instance = autocannon({ url, connections, duration }, (error, result) => {
      if (error) return reject(error);
      if (figures) {
        figures.cpuMicros += cpuMicros(pid) - cpuBefore;
        for (const [name, micros] of threadMicros(pid)) figures.threads.set(name, (figures.threads.get(name) ?? 0) + micros - (threadsBefore.get(name) ?? 0));
        figures.seconds += duration;
        figures.errors += result.errors + result.timeouts + result.non2xx;
      }
      resolve();
    });
    if (figures) {
      instance.on("response", (_client, status, _bytes, ms) => {
        if (status === 200) {
          figures.requests++;
          figures.latencies.push(ms);
        }
      });
    }
  });
}

async function expectAlbum(url: string, photos: number): Promise<void> {
  const response = await fetch(url);
  const body = (await response.json()) as { photos?: unknown[] } | unknown[];
  const count = Array.isArray(body) ? body.length : body.photos?.length;
  if (response.status !== 200 || count !== photos) throw new Error(`${url} answered ${response.status}, ${count} photos`);
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? NaN;

function summary(figures: Figures) {
  const sorted = Float64Array.from(figures.latencies).sort();
  return {
    rps: figures.requests / figures.seconds,
    p50: percentile([...sorted], 0.5),
    p99: percentile([...sorted], 0.99),
    cpu: figures.cpuMicros / figures.requests,
    threads: threadSplit(new Map(), figures.threads, figures.requests),
    errors: figures.errors,
  };
}

async function main(): Promise<void> {
  const started: ServerProcess[] = [];
  try {
    const upstream = await startServer({ runtime: "bun", entry: "bench/album/upstream.ts" });
    started.push(upstream);
    const base = addressOf(upstream);
    const env = { PHOTOS_API_BASE_URL: base };
    const bare = await startServer({ runtime: "bun", entry: "bench/album/proxies.ts", env: { ...env, PROXY: "bare" } });
    started.push(bare);
    const floor = await startServer({ runtime: "bun", entry: "bench/album/proxies.ts", env: { ...env, PROXY: "floor" } });
    started.push(floor);
    const ours = await startServer({ runtime: "bun", env: { ...env, SERVICES: "album", ALBUM_PORT: "0" } });
    started.push(ours);

    const targets: Target[] = [
      { name: "upstream (direct)", url: `${base}/albums/1/photos`, pid: upstream.pid },
      { name: "bare Bun proxy", url: `${addressOf(bare)}/api/albums/1`, pid: bare.pid },
      { name: "contract floor", url: `${addressOf(floor)}/api/albums/1`, pid: floor.pid },
      { name: "album service", url: `${addressOf(ours)}/api/albums/1`, pid: ours.pid },
    ];
    for (const t of targets) await expectAlbum(t.url, 50);
    const figures = new Map(targets.map((t) => [t.name, { requests: 0, seconds: 0, latencies: [], errors: 0, cpuMicros: 0, threads: new Map() } as Figures]));

    console.log(`${connections} connections, ${rounds} rounds of ${seconds} s per target, after a warm-up`);
    for (const t of targets) await load(t, 2);
    for (let round = 1; round <= rounds; round++) {
      for (const t of targets) await load(t, seconds, figures.get(t.name));
      console.log(`round ${round}/${rounds} done`);
    }
    report(targets, figures);
  } finally {
    await Promise.all(started.map((s) => s.stop(2_000)));
  }
}

function report(targets: Target[], figures: Map<string, Figures>): void {
  const rows = targets.map((t) => ({ target: t.name, ...summary(figures.get(t.name)!) }));
  console.log("\ntarget               req/s     p50 ms   p99 ms   errors   server CPU µs/req");
  for (const r of rows) {
    console.log(
      `${r.target.padEnd(18)} ${r.rps.toFixed(0).padStart(8)} ${r.p50.toFixed(3).padStart(9)} ${r.p99.toFixed(3).padStart(8)} ${String(r.errors).padStart(8)} ${r.cpu.toFixed(1).padStart(10)}  ${r.threads}`,
    );
  }
  type Row = (typeof rows)[number];
  const [, bare, floor, ours] = rows as [Row, Row, Row, Row];
  const ratio = ours.rps / floor.rps;
  const extraP99 = ours.p99 - floor.p99;
  console.log(`\nalbum service / bare proxy (req/s): ${(ours.rps / bare.rps).toFixed(3)}; contract floor / bare proxy: ${(floor.rps / bare.rps).toFixed(3)}`);
  console.log(`server CPU per request: album service / contract floor ${(ours.cpu / floor.cpu).toFixed(2)}, / bare proxy ${(ours.cpu / bare.cpu).toFixed(2)}`);
  console.log(`p99 over the contract floor's: ${extraP99.toFixed(3)} ms (target <= 1 ms: ${extraP99 <= 1 ? "met" : "missed"})`);
  console.log(`ratio album service / contract floor (req/s): ${ratio.toFixed(3)} (target >= 0.95: ${ratio >= 0.95 ? "met" : "missed"})`);
}

await main();

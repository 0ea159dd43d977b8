import { runLoad } from "../test/support/load.ts";
import type { RuntimeName } from "../test/support/server-process.ts";

// The load-and-fault run (test/support/load.ts), longer than in `npm test`, printing its figures:
// concurrent chat and completions, half streamed, over TCP and the socket, abandoned streams, bad
// inputs and runners killed, against the server under each runtime. Exits 1 on any problem.
//
//   npm run bench:load     (LOAD_SECONDS, LOAD_CONCURRENCY, LOAD_KILLS, LOAD_RUNTIMES=bun,node,deno)

const seconds = Number(process.env.LOAD_SECONDS ?? 30);
const concurrency = Number(process.env.LOAD_CONCURRENCY ?? 64);
const kills = Number(process.env.LOAD_KILLS ?? 3);
const runtimes = (process.env.LOAD_RUNTIMES ?? "bun,node,deno").split(",") as RuntimeName[];

let problems = 0;
for (const runtime of runtimes) {
  const report = await runLoad({ runtime, seconds, concurrency, kills });
  const counts = Object.entries(report.counts)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([kind, n]) => `${kind}: ${n}`)
    .join(", ");
  console.log(`${runtime}: ${report.requests} requests in ${seconds} s, ${concurrency} clients, ${report.kills} runners killed`);
  console.log(`  ${counts}`);
  console.log(`  latency p50 ${report.latencyMs.p50} ms, p99 ${report.latencyMs.p99} ms, max ${report.latencyMs.max} ms`);
  for (const problem of report.problems.slice(0, 20)) console.log(`  PROBLEM ${problem}`);
  problems += report.problems.length;
}
console.log(`load and faults: ${problems} problems (target 0)`);
process.exit(problems ? 1 : 0);

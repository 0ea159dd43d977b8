import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

// Where a server's CPU went, from the V8 CPU profiles (--cpu-prof) that bench:inference writes with
// BENCH_PROFILE=<dir>: the functions with the most self time, and the same summed per source file
// (ours by their path in the project, the runtime's and dependencies' by theirs).
//   npm run bench:profile-report -- <dir with .cpuprofile files> [how many functions, default 30]

type Node = { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] };
type Profile = { nodes: Node[]; samples: number[]; timeDeltas: number[] };

const [dir, topArg] = process.argv.slice(2);
if (!dir) throw new Error("usage: profile-report.ts <dir> [top]");
const top = Number(topArg ?? 30);

const byFunction = new Map<string, number>();
const byFile = new Map<string, number>();
let total = 0;
const add = (map: Map<string, number>, key: string, micros: number) => map.set(key, (map.get(key) ?? 0) + micros);
const shortUrl = (url: string) => (url.startsWith("file://") ? relative(process.cwd(), new URL(url).pathname) : url || "(native)");

for (const file of readdirSync(dir).filter((name) => name.endsWith(".cpuprofile"))) {
  const profile = JSON.parse(readFileSync(join(dir, file), "utf8")) as Profile;
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  profile.samples.forEach((id, i) => {
    const { functionName, url, lineNumber } = nodes.get(id)!.callFrame;
    const micros = profile.timeDeltas[i] ?? 0;
    if (functionName === "(idle)" || functionName === "(program)") return;
    total += micros;
    add(byFunction, `${functionName || "(anonymous)"}  ${shortUrl(url)}:${lineNumber + 1}`, micros);
    add(byFile, shortUrl(url), micros);
  });
}

const print = (title: string, map: Map<string, number>, count: number) => {
  console.log(`\n${title}`);
  for (const [key, micros] of [...map].sort((a, b) => b[1] - a[1]).slice(0, count)) {
    console.log(`${((100 * micros) / total).toFixed(1).padStart(6)}%  ${(micros / 1000).toFixed(0).padStart(7)} ms  ${key}`);
  }
};
console.log(`busy: ${(total / 1000).toFixed(0)} ms (idle and "(program)" left out)`);
print("self time by function", byFunction, top);
print("self time by file", byFile, 25);

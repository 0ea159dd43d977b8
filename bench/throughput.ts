import { spawn } from "node:child_process";

// The three throughput benches in one command, each run as `npm run` would, their output passed
// through; then every line that states a target, gathered and judged, so that a regression in any
// ratio shows in one place. Exits 1 when a target is missed.
//
//   npm run bench:throughput      (each bench's own variables tune it)

const BENCHES = ["bench:pull", "bench:inference", "bench:album"];

/** `<value>[ ms| MiB] (target <op> <bound>`: a figure a line states and the bound it must meet. */
const TARGET = /(-?\d+(?:\.\d+)?)(?: ms| MiB)?\s*\(target\s*(>=|<=|<)\s*(\d+(?:\.\d+)?)/g;

/** One line that states targets, with whether each is met, in order. */
type Judged = { bench: string; line: string; met: boolean[] };

function run(bench: string): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const child = spawn("npm", ["run", "-s", bench], { stdio: ["ignore", "pipe", "inherit"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => {
      process.stdout.write(chunk);
      output += chunk.toString("utf8");
    });
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(output.split("\n")) : reject(new Error(`${bench} exited with ${code}`))));
  });
}

/** The targets a line states (a line may state two), or undefined if none. */
function judge(bench: string, line: string): Judged | undefined {
  const met = [...line.matchAll(TARGET)].map(([, value, op, bound]) => {
    const [v, b] = [Number(value), Number(bound)];
    return op === ">=" ? v >= b : op === "<=" ? v <= b : v < b;
  });
  return met.length ? { bench, line: line.trim(), met } : undefined;
}

/** A bench that ends with a `summary` repeats its targets there: only that part is judged. */
function stated(lines: string[]): string[] {
  const summary = lines.lastIndexOf("summary");
  return summary < 0 ? lines : lines.slice(summary + 1);
}

const judged: Judged[] = [];
for (const bench of BENCHES) {
  console.log(`\n=== npm run ${bench}`);
  for (const line of stated(await run(bench))) {
    const verdict = judge(bench, line);
    if (verdict) judged.push(verdict);
  }
}
console.log("\n=== throughput targets (each line: MISSED if any target it states is missed)");
for (const { bench, line, met } of judged) {
  const each = met.length > 1 ? `   [${met.map((m) => (m ? "met" : "missed")).join(", ")}]` : "";
  console.log(`${met.every(Boolean) ? "met   " : "MISSED"} ${bench.padEnd(16)} ${line}${each}`);
}
process.exitCode = judged.every((j) => j.met.every(Boolean)) ? 0 : 1;

import { readFileSync } from "node:fs";

// Reads a sampling heap profile (bench/heap-profile.ts) and prints where the bytes went: the
// functions that allocated most themselves, and each of our source files with what the runtime and
// libraries allocated on its behalf (charged to the nearest of our frames above them).
//
//   npm run -s heap-report -- ours.heapprofile [rows]

type Node = { callFrame: { functionName: string; url: string; lineNumber: number }; selfSize: number; children: Node[] };

const [file, rowsText] = process.argv.slice(2);
if (!file) {
  console.error("usage: npm run -s heap-report -- <profile> [rows]");
  process.exit(2);
}
const rows = Number(rowsText ?? 25);
const head = (JSON.parse(readFileSync(file, "utf8")) as { head: Node }).head;

const ours = (url: string) => (url.includes("/src/") ? `src/${url.split("/src/")[1]}` : undefined);
const byFunction = new Map<string, number>();
const byOurFile = new Map<string, number>();
let total = 0;
const add = (map: Map<string, number>, key: string, bytes: number) => map.set(key, (map.get(key) ?? 0) + bytes);

function walk(node: Node, owner: string): void {
  const { functionName, url, lineNumber } = node.callFrame;
  const file = ours(url) ?? url.split("/").pop() ?? "";
  total += node.selfSize;
  add(byFunction, `${functionName || "(anonymous)"} ${file}:${lineNumber + 1}`, node.selfSize);
  const charged = ours(url) ?? owner;
  add(byOurFile, charged, node.selfSize);
  for (const child of node.children) walk(child, charged);
}
walk(head, "(outside our code)");

const print = (title: string, map: Map<string, number>) => {
  console.log(title);
  for (const [key, bytes] of [...map].sort((a, b) => b[1] - a[1]).slice(0, rows)) {
    console.log(`  ${((100 * bytes) / total).toFixed(1).padStart(5)}%  ${key}`);
  }
};
console.log(`${(total / 2 ** 20).toFixed(1)} MiB allocated in the window`);
print("by function (its own allocations):", byFunction);
print("by our file (with what it caused below it):", byOurFile);

import { spawnSync } from "node:child_process";
import { parseJson, encodeJson, withLeadingField } from "../src/http/body.ts";
import { policeBody } from "../src/inference/body-policy.ts";
import { structuredRequest } from "../src/inference/structured.ts";
import { requestedModel } from "../src/inference/requests.ts";
import { prefixOf, sessionOf } from "../src/inference/session.ts";
import { commandLine, runtimeBinary, type RuntimeName } from "../test/support/server-process.ts";

// What each pass over a request body costs our process, per runtime, beside the body's own parse
// (the floor: every body is parsed once): a small chat, an agent's start (about 80 KB of system
// prompt and tools) with a short conversation, and the same with a 1 MB conversation. Among the
// passes: the digest of the start that slot placement groups sessions by (session.ts's prefixOf),
// and a body written again for one field (encodeJson) against that field spliced into its bytes
// as they came (withLeadingField), as the token bound now does.
//
//   npm run bench:bodies     (BENCH_RUNTIMES=bun,node,deno)

const runtimes = (process.env.BENCH_RUNTIMES ?? "bun,node,deno").split(",") as RuntimeName[];

if (!process.env.BENCH_BODIES_CHILD) {
  for (const runtime of runtimes) {
    const args = commandLine({ runtime, entry: "bench/bodies.ts", runtimeArgs: runtime === "deno" ? ["--allow-env", "--allow-read", "--allow-sys"] : [] });
    const run = spawnSync(runtimeBinary(runtime), args, { stdio: "inherit", env: { ...process.env, BENCH_BODIES_CHILD: "1" } });
    if (run.status !== 0) process.exit(run.status ?? 1);
  }
  process.exit(0);
}

const tool = (i: number) => ({
  type: "function",
  function: {
    name: `tool_${i}`,
    description: "Reads a file from the local filesystem. You can access any file directly by using this tool. ".repeat(6),
    parameters: { type: "object", properties: { file_path: { type: "string", description: "The absolute path to the file to read" }, offset: { type: "number" }, limit: { type: "number" } }, required: ["file_path"], additionalProperties: false },
  },
});
const system = { role: "system", content: "You are an agent for coding, run from a terminal. ".repeat(300) };
const turn = (i: number) => [
  { role: "user", content: `Please look at file ${i} and tell me what it does. `.repeat(20) },
  { role: "assistant", content: null, tool_calls: [{ id: `c${i}`, type: "function", function: { name: "tool_1", arguments: JSON.stringify({ file_path: `/src/f${i}.ts` }) } }] },
  { role: "tool", tool_call_id: `c${i}`, content: "export const x = 1;\n".repeat(60) },
];
const tools = Array.from({ length: 70 }, (_, i) => tool(i));
const BODIES = {
  "small chat": { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 1 },
  "agent start": { model: "ai/tiny", messages: [system, { role: "user", content: "hi" }], tools },
  "start, 1 MB talk": { model: "ai/tiny", messages: [system, ...Array.from({ length: 400 }, (_, i) => turn(i)).flat()], tools },
};

const runtime = "Bun" in globalThis ? "bun" : "Deno" in globalThis ? "deno" : "node";
const headers = new Headers({ "content-type": "application/json", "x-claude-code-session-id": "s1" });

/** µs per call of `pass` on a fresh parse of `bytes` each time (the digest is kept per body), the first quarter unmeasured. */
function cost(bytes: Uint8Array, pass: (body: Record<string, unknown>) => unknown, calls: number): number {
  let spent = 0;
  for (let i = 0; i < calls * 1.25; i++) {
    const body = parseJson(bytes) as Record<string, unknown>;
    const began = performance.now();
    pass(body);
    if (i >= calls / 4) spent += performance.now() - began;
  }
  return (spent * 1000) / calls;
}

const f = (us: number) => `${us.toFixed(1)} µs`;
for (const [name, value] of Object.entries(BODIES)) {
  const bytes = new TextEncoder().encode(JSON.stringify(value)) as Uint8Array<ArrayBuffer>;
  const calls = bytes.length < 10_000 ? 20_000 : bytes.length < 200_000 ? 400 : 60;
  const parse = cost(bytes, () => parseJson(bytes), calls);
  const passes: [string, (body: Record<string, unknown>) => unknown][] = [
    ["check (zod)", (body) => requestedModel("chat/completions", body)],
    ["policy", (body) => policeBody(body, { allowRemoteMedia: false })],
    ["schemas", (body) => structuredRequest("chat/completions", body)],
    ["session", (body) => sessionOf(headers, body)],
    ["start digest", (body) => prefixOf(body)],
    ["written again", (body) => encodeJson(body, Number.POSITIVE_INFINITY)],
    ["field spliced", () => withLeadingField(bytes, "max_tokens", 4096)],
  ];
  const figures = passes.map(([label, pass]) => `${label} ${f(cost(bytes, pass, calls))}`);
  console.log(`${runtime} ${name} (${(bytes.length / 1024).toFixed(0)} KiB): parse (the floor) ${f(parse)}; ${figures.join(", ")}`);
}

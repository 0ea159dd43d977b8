import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { CHAT_MODEL } from "../support/chat-model.ts";
import { startStack, type Stack } from "../inference/harness.ts";

// A decision model on an engine that serves /v1/systemone itself: its request is forwarded, as it
// came, and the engine's answer is the client's. No such engine can be had here (llama-server
// v0.5.0 has no decision route, and no decision model is to be had), so a small HTTP server
// stands in for a newer llama-server: started by the runner like the real one (the same command
// line, on the socket it names), it answers /health, and /v1/systemone with an answer of its own
// that names what it was sent. (The fallback, on the real llama-server, is in decisions.test.ts.)

const STAND_IN = `
const http = require("node:http");
const args = process.argv.slice(2);
if (args.includes("--version")) { console.log("version: 9.9.9 (a stand-in for an engine with decision models)"); process.exit(0); }
if (args.includes("--list-devices")) { console.log("Available devices:"); process.exit(0); }
const send = (res, status, body) => { res.writeHead(status, { "content-type": "application/json" }); res.end(JSON.stringify(body)); };
const server = http.createServer((req, res) => {
  let text = "";
  req.on("data", (chunk) => (text += chunk));
  req.on("end", () => {
    if (req.url === "/health") return send(res, 200, { status: "ok" });
    if (req.method === "POST" && req.url === "/v1/systemone") {
      const body = JSON.parse(text);
      const answers = Object.fromEntries(Object.keys(body.questions).map((name) => [name, { type: "noul", noul: 0.75 }]));
      return send(res, 200, { model: body.model, answers, usage: { input_tokens: 17, output_tokens: 0 }, sent: body });
    }
    send(res, 404, { error: { message: "File Not Found", type: "not_found_error", code: 404 } });
  });
});
server.listen(args[args.indexOf("--host") + 1]);
process.on("SIGTERM", () => server.close(() => process.exit(0)));
`;

let stack: Stack;
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-engine-"));
  const engine = join(dir, "llama-server");
  await writeFile(engine, `#!${process.execPath}\n${STAND_IN}`);
  await chmod(engine, 0o755);
  const decider = { ...CHAT_MODEL, strings: { "decision.type": "systemone" } };
  stack = await startStack({ models: [], shaped: { "ai/decider": decider }, env: { LLAMA_SERVER_PATH: engine } });
});
afterAll(async () => {
  await stack?.stop();
  await rm(dir, { recursive: true, force: true });
});

it("forwards a decision model's System One request to the engine that serves it, and counts its usage", async () => {
  const shown = (await ask({ url: stack.url }, "GET", "/v1/models/ai/decider")).json();
  expect(shown.capabilities).toEqual({ decisions: "chat-next-token", systemone: "engine" });
  const body = { model: "ai/decider", state: "Our checkout fails.", questions: { outage: { type: "noul", instructions: "Is it down?" } } };
  const before = (await ask({ url: stack.url }, "GET", "/engines/usage")).json().total;
  for (const path of ["/v1/systemone", "/engines/v1/systemone", "/engines/llama.cpp/v1/systemone"]) {
    const answer = await ask({ url: stack.url }, "POST", path, body);
    expect(answer.status).toBe(200);
    expect(answer.headers["x-llamadock-decision-method"]).toBe("engine");
    expect(answer.json()).toEqual({ model: "ai/decider", answers: { outage: { type: "noul", noul: 0.75 } }, usage: { input_tokens: 17, output_tokens: 0 }, sent: body });
  }
  const after = (await ask({ url: stack.url }, "GET", "/engines/usage")).json().total;
  expect(after.requests - before.requests).toBe(3);
  expect(after.prompt_tokens - before.prompt_tokens).toBe(3 * 17);
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { VERSION } from "../../src/version.ts";
import { ask } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// What Docker Model Runner's own clients (its CLI, `docker model compose`) send and read, in the
// shapes of DMR's source: its configure body, `GET /engines/_configure`, the status string its CLI
// parses, `GET /` and `GET /version`. The server runs under Bun with real runners.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny", "ai/draft"] });
});
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
const chat = { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4, ...NO_EARLY_STOP };

describe("Docker Model Runner's clients", () => {
  it("GET / and GET /version answer as DMR does", async () => {
    const root = await ask(tcp(), "GET", "/");
    expect([root.status, root.body, root.headers["content-type"]]).toEqual([200, "Docker Model Runner is running", expect.stringMatching(/^text\/plain/)]);
    expect((await ask(tcp(), "GET", "/version")).json()).toEqual({ version: VERSION });
    expect((await ask({ socketPath: stack.socket }, "GET", "/exp/vDD4.40/version")).json()).toEqual({ version: VERSION });
  });

  it("GET /engines/status answers `Running: llama.cpp <version>`, which DMR's CLI splits at ': '", async () => {
    const status = (await ask(tcp(), "GET", "/engines/status")).json() as Record<string, string>;
    const [type, details] = status["llama.cpp"]!.split(/: (.*)/s);
    expect(type).toBe("Running");
    expect(details).toMatch(/^llama\.cpp \d+\.\d+\.\d+/);
  });

  it("configure takes the body DMR's CLI sends, ignores unknown keys, and the runner loads with it", async () => {
    const body = {
      model: "ai/tiny",
      "context-size": -1,
      "raw-runtime-flags": "--temp 0.5 --top-k '10'",
      speculative: { draft_model: "ai/draft", num_tokens: 2, min_acceptance_rate: 0.5 },
      llamacpp: { "reasoning-budget": 0 },
      keep_alive: "10m",
      vllm: { "gpu-memory-utilization": 0.9 },
      "a-newer-field": true,
    };
    const configured = await ask(tcp(), "POST", "/engines/_configure", body);
    expect(configured.status).toBe(202);
    const answer = await ask(tcp(), "POST", "/v1/chat/completions", chat);
    expect(answer.status).toBe(200);
    const config = {
      "context-size": 0,
      keep_alive: "10m",
      "runtime-flags": ["--temp", "0.5", "--top-k", "10"],
      llamacpp: { "reasoning-budget": 0 },
      speculative: { draft_model: expect.stringMatching(/ai\/draft:latest$/), num_tokens: 2, min_acceptance_rate: 0.5 },
    };
    const shown = (await ask(tcp(), "GET", "/engines/_configure?model=ai/tiny")).json();
    expect(shown).toEqual([{ Backend: "llama.cpp", Model: expect.stringMatching(/ai\/tiny:latest$/), ModelID: expect.stringMatching(/^sha256:/), Mode: "completion", Config: config }]);
    // The draft model really runs beside it: llama-server logs that it loaded one.
    expect(await stack.runnerLogs()).toMatch(/loading draft model .*blobs\/sha256\/[0-9a-f]{64}/);
  });

  it("lists every configured model, and 404 for a model it does not have", async () => {
    expect((await ask(tcp(), "POST", "/engines/_configure", { model: "ai/draft", slots: 1 })).status).toBe(202);
    const all = (await ask(tcp(), "GET", "/engines/_configure")).json() as { Model: string }[];
    expect(all.map((e) => e.Model.replace(/^.*ai\//, "")).sort()).toEqual(["draft:latest", "tiny:latest"]);
    expect((await ask(tcp(), "GET", "/engines/_configure?model=ai/absent")).status).toBe(404);
  });

  it.each([
    ["shell operators in raw-runtime-flags", { "raw-runtime-flags": "--temp 1; rm -rf x" }, 400, "invalid_settings"],
    ["a disallowed flag in raw-runtime-flags", { "raw-runtime-flags": "--model x.gguf" }, 400, "invalid_settings"],
    ["a draft model it does not have", { speculative: { draft_model: "ai/absent" } }, 404, "model_not_found"],
    ["a context size below -1", { "context-size": -2 }, 400, "invalid_request"],
    ["a mode it does not serve", { mode: "image-generation" }, 400, "invalid_request"],
  ])("refuses %s with a JSON error", async (_, extra, status, code) => {
    const answer = await ask(tcp(), "POST", "/engines/_configure", { model: "ai/tiny", ...extra });
    expect([answer.status, answer.json().error.code]).toEqual([status, code]);
  });

  it("an embedding runner takes a configured pooling", async () => {
    expect((await ask(tcp(), "POST", "/engines/_configure", { model: "ai/draft", mode: "embedding", pooling: "last" })).status).toBe(202);
    const answer = await ask(tcp(), "POST", "/v1/embeddings", { model: "ai/draft", input: "x" });
    expect(answer.json().data[0].embedding).toHaveLength(64);
    expect((await ask(tcp(), "GET", "/engines/_configure?model=ai/draft")).json()[0].Config).toMatchObject({ pooling: "last", slots: 1 });
  });
});

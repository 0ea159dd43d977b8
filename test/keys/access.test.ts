import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ACCESS } from "../../src/keys/access.ts";
import { packageModel } from "../../src/models/package/archive.ts";
import { startStack, type Stack } from "../inference/harness.ts";
import { CHAT_MODEL } from "../support/chat-model.ts";
import { publishBuild } from "../support/engine-builds.ts";
import { ask } from "../support/http.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// Who may call what (src/keys/access.ts, docs/security.md's table), end to end: every row of the
// table asked over real HTTP by a plain key and by an admin key of a key file, against the real
// model runner (its store pulled from a real registry, real llama-server runners, real engine
// builds). An admin row: the plain key's call is refused (403 `admin_only`, in its dialect's
// shape) and changed nothing, then the admin's call does what it asks. An any-key row: both are
// answered as the route answers anyone. Then what the table leaves to the keys and the socket:
// Ollama's unload, /metrics' per-key series, the Unix socket's caller.

const KEYS = { plain: "sk-access-plain-7f3a", admin: "sk-access-admin-0b5e" };
type Who = keyof typeof KEYS;

let stack: Stack;
let dir: string;
const builds: Record<string, string> = {};

beforeAll(async () => {
  stack = await startStack({
    models: ["ai/tiny"],
    embedders: ["ai/embedder"],
    rerankers: ["ai/ranker"],
    shaped: { "ai/chat": CHAT_MODEL },
    unpulled: ["ai/extra", "ai/more"],
  });
  builds.v1 = (await publishBuild(stack.registry, "as-built", "v1")).reference;
  builds.v2 = (await publishBuild(stack.registry, "as-built", "v2", (folder) => writeFile(join(folder, "NOTES"), "v2"))).reference;
  dir = await mkdtemp(join(tmpdir(), "llamadock-access-"));
  await writeFile(join(dir, "tiny.gguf"), tinyLlamaGguf({ seed: 41 }));
  await writeFile(join(stack.dir, "keys"), `${KEYS.plain} name=plain\n${KEYS.admin} name=boss admin\n`);
  await stack.restart({ API_KEYS_FILE: join(stack.dir, "keys"), OPEN_PATHS: "/metrics" });
}, 240_000);
afterAll(async () => {
  await stack?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

type Answer = { status: number; text: string; json(): any };

/** A call as `who`, over TCP: a JSON body, raw bytes, or a form. */
async function as(who: Who | undefined, method: string, path: string, body?: object | Uint8Array | FormData): Promise<Answer> {
  const headers: Record<string, string> = who ? { authorization: `Bearer ${KEYS[who]}` } : {};
  const json = body !== undefined && !(body instanceof Uint8Array) && !(body instanceof FormData);
  if (json) headers["content-type"] = "application/json";
  const response = await fetch(`${stack.url}${path}`, { method, headers, ...(body !== undefined ? { body: json ? JSON.stringify(body) : (body as BodyInit) } : {}) });
  const text = await response.text();
  return { status: response.status, text, json: () => JSON.parse(text) };
}

const get = async (path: string) => (await as("admin", "GET", path)).json();
const modelNames = async () => ((await get("/models")) as { tags: string[] }[]).flatMap((m) => m.tags);
const buildNames = async () => ((await get("/engines/builds")) as { builds: { name: string }[] }).builds.map((b) => b.name);
const defaultBuild = async () => ((await get("/engines/builds")) as { default: string }).default;
/** The registry's answer for the manifest a push of team/tiny:v1 sends. */
const pushed = async () => (await fetch(`${stack.registry.url}/v2/team/tiny/manifests/v1`, { method: "HEAD", headers: { accept: "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json" } })).status;
const chat = (model = "ai/tiny") => ({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4 });

/** An upload of one chat line as `who`: its file id. */
async function upload(who: Who): Promise<string> {
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", new Blob([`${JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/chat/completions", body: chat() })}\n`]), "in.jsonl");
  const answer = await as(who, "POST", "/v1/files", form);
  expect(answer.status, answer.text).toBe(200);
  return answer.json().id;
}

async function batch(who: Who): Promise<Answer> {
  return as(who, "POST", "/v1/batches", { input_file_id: await upload(who), endpoint: "/v1/chat/completions", completion_window: "24h" });
}

type Case = {
  /** The call, as each key makes it. */
  call(who: Who): Promise<Answer>;
  /** The status the call gets when it is allowed. */
  status: number;
  /** An admin row: what the plain key's refused call must have left as it was. */
  unchanged?(): Promise<void>;
  /** An admin row: what the admin's call did. */
  done?(): Promise<void>;
};

const DECISION = { model: "ai/chat", input: "A red apple.", questions: [{ type: "predicate", instructions: "It is red." }] };
const SYSTEM_ONE = { model: "ai/chat", state: "A red apple.", questions: { red: { type: "noul", instructions: "It is red." } } };

/** Every row of the access table, in the order they run (the admin rows change the store and builds the next ones use). */
const CASES: [string, Case][] = [
  // Any key's: its own requests.
  ["POST {base}/chat/completions", { call: (who) => as(who, "POST", "/v1/chat/completions", chat()), status: 200 }],
  ["POST {base}/completions", { call: (who) => as(who, "POST", "/engines/v1/completions", { model: "ai/tiny", prompt: "hi", max_tokens: 4 }), status: 200 }],
  ["POST {base}/embeddings", { call: (who) => as(who, "POST", "/v1/embeddings", { model: "ai/embedder", input: "hi" }), status: 200 }],
  ["POST {base}/messages", { call: (who) => as(who, "POST", "/v1/messages", { model: "ai/tiny", max_tokens: 4, messages: [{ role: "user", content: "hi" }] }), status: 200 }],
  ["POST {base}/messages/count_tokens", { call: (who) => as(who, "POST", "/anthropic/v1/messages/count_tokens", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }] }), status: 200 }],
  ["POST {base}/responses", { call: (who) => as(who, "POST", "/v1/responses", { model: "ai/tiny", input: "hi", max_output_tokens: 4 }), status: 200 }],
  ["POST {base}/rerank", { call: (who) => as(who, "POST", "/v1/rerank", { model: "ai/ranker", query: "a", documents: ["b", "c"] }), status: 200 }],
  ["POST {base}/score", { call: (who) => as(who, "POST", "/score", { model: "ai/ranker", text_1: "a", text_2: ["b"] }), status: 200 }],
  ["POST {base}/decisions", { call: (who) => as(who, "POST", "/v1/decisions", DECISION), status: 200 }],
  ["POST {base}/systemone", { call: (who) => as(who, "POST", "/engines/llama.cpp/v1/systemone", SYSTEM_ONE), status: 200 }],
  ["POST /tokenize", { call: (who) => as(who, "POST", "/tokenize", { model: "ai/tiny", content: "hi" }), status: 200 }],
  ["POST /detokenize", { call: (who) => as(who, "POST", "/detokenize", { model: "ai/tiny", tokens: [1, 2] }), status: 200 }],
  ["POST /api/chat", { call: (who) => as(who, "POST", "/api/chat", { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], stream: false, options: { num_predict: 4 } }), status: 200 }],
  ["POST /api/generate", { call: (who) => as(who, "POST", "/api/generate", { model: "ai/tiny", prompt: "hi", stream: false, options: { num_predict: 4 } }), status: 200 }],
  ["POST /api/embed", { call: (who) => as(who, "POST", "/api/embed", { model: "ai/embedder", input: "hi" }), status: 200 }],
  ["POST /api/embeddings", { call: (who) => as(who, "POST", "/api/embeddings", { model: "ai/embedder", prompt: "hi" }), status: 200 }],
  ["POST /engines/:engine/v1/*", { call: (who) => as(who, "POST", "/engines/vllm/v1/chat/completions", chat()), status: 404 }],
  ["POST /api/show", { call: (who) => as(who, "POST", "/api/show", { model: "ai/tiny" }), status: 200 }],
  ["POST /engines/fit", { call: (who) => as(who, "POST", "/engines/fit", { model: "ai/tiny" }), status: 200 }],
  // Any key's: its own things.
  [
    "DELETE {base}/responses/:id",
    {
      call: async (who) => as(who, "DELETE", `/v1/responses/${(await as(who, "POST", "/v1/responses", { model: "ai/tiny", input: "hi", max_output_tokens: 2 })).json().id}`),
      status: 200,
    },
  ],
  ["POST {base}/files", { call: async (who) => as(who, "GET", `/v1/files/${await upload(who)}`), status: 200 }],
  ["DELETE {base}/files/:id", { call: async (who) => as(who, "DELETE", `/v1/files/${await upload(who)}`), status: 200 }],
  ["POST {base}/batches", { call: batch, status: 200 }],
  ["POST {base}/batches/:id/cancel", { call: async (who) => as(who, "POST", `/v1/batches/${(await batch(who)).json().id}/cancel`), status: 200 }],
  // An admin's: the store.
  [
    "POST /models/create",
    {
      call: (who) => as(who, "POST", "/models/create", { from: "ai/extra" }),
      status: 200,
      unchanged: async () => expect(await modelNames()).not.toContain("ai/extra:latest"),
      done: async () => expect(await modelNames()).toContain("ai/extra:latest"),
    },
  ],
  [
    "POST /api/pull",
    {
      call: (who) => as(who, "POST", "/api/pull", { model: "ai/more", stream: false }),
      status: 200,
      unchanged: async () => expect(await modelNames()).not.toContain("ai/more:latest"),
      done: async () => expect(await modelNames()).toContain("ai/more:latest"),
    },
  ],
  [
    "POST /models/load",
    {
      call: async (who) => as(who, "POST", "/models/load?tag=team/loaded", new Uint8Array(await new Response((await packageModel({ weights: [join(dir, "tiny.gguf")] })).archive()).arrayBuffer())),
      status: 200,
      unchanged: async () => expect(await modelNames()).not.toContain("team/loaded:latest"),
      done: async () => expect(await modelNames()).toContain("team/loaded:latest"),
    },
  ],
  [
    "POST /models/:reference+/tag",
    {
      call: (who) => as(who, "POST", `/models/ai/tiny/tag?repo=${stack.registry.host}/team/tiny&tag=v1`),
      status: 201,
      unchanged: async () => expect((await modelNames()).filter((n) => n.includes("team/tiny"))).toEqual([]),
      done: async () => expect((await modelNames()).filter((n) => n.includes("team/tiny"))).toHaveLength(1),
    },
  ],
  [
    "POST /api/copy",
    {
      call: (who) => as(who, "POST", "/api/copy", { source: "ai/tiny", destination: "team/copy" }),
      status: 200,
      unchanged: async () => expect(await modelNames()).not.toContain("team/copy:latest"),
      done: async () => expect(await modelNames()).toContain("team/copy:latest"),
    },
  ],
  [
    "POST /models/:reference+/push",
    {
      call: (who) => as(who, "POST", `/models/${stack.registry.host}/team/tiny:v1/push`),
      status: 200,
      unchanged: async () => expect(await pushed()).toBe(404),
      done: async () => expect(await pushed()).toBe(200),
    },
  ],
  [
    "DELETE /models/:reference+",
    {
      call: (who) => as(who, "DELETE", "/models/team/copy"),
      status: 200,
      unchanged: async () => expect(await modelNames()).toContain("team/copy:latest"),
      done: async () => expect(await modelNames()).not.toContain("team/copy:latest"),
    },
  ],
  [
    "DELETE /api/delete",
    {
      call: (who) => as(who, "DELETE", "/api/delete", { model: "ai/more" }),
      status: 200,
      unchanged: async () => expect(await modelNames()).toContain("ai/more:latest"),
      done: async () => expect(await modelNames()).not.toContain("ai/more:latest"),
    },
  ],
  // An admin's: what runs.
  [
    "POST /engines/unload",
    {
      call: async (who) => {
        // A runner loaded, idle: what unload takes.
        expect((await as("plain", "POST", "/v1/chat/completions", chat("ai/chat"))).status).toBe(200);
        return as(who, "POST", "/engines/unload", { all: true });
      },
      status: 200,
      unchanged: async () => expect(((await get("/engines/ps")) as { model_name: string }[]).map((r) => r.model_name)).toContain("ai/chat:latest"),
      done: async () => expect(((await get("/engines/ps")) as { model_name: string }[]).map((r) => r.model_name)).not.toContain("ai/chat:latest"),
    },
  ],
  [
    "POST /engines/builds",
    {
      call: (who) => as(who, "POST", "/engines/builds", { reference: builds.v1 }),
      status: 201,
      unchanged: async () => expect(await buildNames()).toEqual(["builtin"]),
      done: async () => expect(await buildNames()).toEqual(["builtin", "v1"]),
    },
  ],
  [
    "POST /engines/builds/default",
    {
      call: (who) => as(who, "POST", "/engines/builds/default", { name: "v1" }),
      status: 200,
      unchanged: async () => expect(await defaultBuild()).toBe("builtin"),
      done: async () => expect(await defaultBuild()).toBe("v1"),
    },
  ],
  [
    "POST /engines/install-backend",
    {
      call: (who) => as(who, "POST", "/engines/install-backend", { backend: "llama.cpp", reference: builds.v2 }),
      status: 200,
      unchanged: async () => expect([await buildNames(), await defaultBuild()]).toEqual([["builtin", "v1"], "v1"]),
      // The default as install-backend names it: the reference it pulled.
      done: async () => expect([await buildNames(), await defaultBuild()]).toEqual([["builtin", "v1", "v2"], "llamadock/llama-server:v2"]),
    },
  ],
  [
    "POST /engines/uninstall-backend",
    {
      call: (who) => as(who, "POST", "/engines/uninstall-backend", { backend: "llama.cpp" }),
      status: 200,
      unchanged: async () => expect(await defaultBuild()).toBe("llamadock/llama-server:v2"),
      done: async () => expect(await defaultBuild()).toBe("builtin"),
    },
  ],
  [
    "POST /engines/_configure",
    {
      call: (who) => as(who, "POST", "/engines/_configure", { model: "ai/tiny", engine: "v1" }),
      status: 202,
      unchanged: async () => expect(JSON.stringify(await get("/engines/_configure?model=ai/tiny"))).not.toMatch(/"engine"/),
      done: async () => expect(JSON.stringify(await get("/engines/_configure?model=ai/tiny"))).toMatch(/"engine":"v1"/),
    },
  ],
  [
    "DELETE /engines/builds/:name+",
    {
      call: async (who) => {
        // The runners v2's install moved there have moved back to the builtin build.
        await until(async () => ((await get("/engines/ps")) as { engine: string }[]).every((r) => r.engine !== "v2"), "no runner on v2");
        return as(who, "DELETE", "/engines/builds/v2");
      },
      status: 200,
      unchanged: async () => expect(await buildNames()).toContain("v2"),
      done: async () => expect(await buildNames()).not.toContain("v2"),
    },
  ],
  [
    "DELETE /models/purge",
    {
      call: async (who) => {
        // The batches' lines ended: a purge of everything waits for no request.
        const ended = ["completed", "cancelled", "failed", "expired"];
        await until(async () => ((await get("/v1/batches")).data as { status: string }[]).every((b) => ended.includes(b.status)), "the batches to end");
        // Nor a runner loading (a move to the build _configure named) or serving: a purge waits for none.
        await until(async () => ((await get("/engines/ps")) as { loading: boolean; in_flight: number; waiting: number }[]).every((r) => !r.loading && r.in_flight === 0 && r.waiting === 0), "every runner idle");
        return as(who, "DELETE", "/models/purge");
      },
      status: 200,
      unchanged: async () => expect(await modelNames()).toContain("ai/tiny:latest"),
      done: async () => expect(await modelNames()).toEqual([]),
    },
  ],
];

const psNames = async () => ((await get("/engines/ps")) as { model_name: string }[]).map((r) => r.model_name);

describe("what the table leaves to a route's body, to /metrics and to the socket", () => {
  it("Ollama's unload (no prompt, keep_alive 0, as `ollama stop` sends it) is an admin's; its load is any key's", async () => {
    const stop = { model: "ai/tiny", prompt: "", keep_alive: 0, stream: false };
    const load = await as("plain", "POST", "/api/generate", { ...stop, keep_alive: "5m" });
    expect([load.status, load.json().done_reason]).toEqual([200, "load"]);
    const refused = await as("plain", "POST", "/api/generate", stop);
    expect(refused.status).toBe(403);
    expect(refused.json()).toEqual({ error: "unloading a model takes an admin key: other keys use its runners" });
    expect(await psNames()).toContain("ai/tiny:latest");
    const stopped = await as("admin", "POST", "/api/chat", { ...stop, messages: [] });
    expect([stopped.status, stopped.json().done_reason]).toEqual([200, "unload"]);
    expect(await psNames()).not.toContain("ai/tiny:latest");
  });

  it("/metrics shows a plain key its own key's series, an admin every key's, a keyless scrape (an open path) none", async () => {
    for (const who of ["plain", "admin"] as const) expect((await as(who, "POST", "/v1/chat/completions", chat())).status).toBe(200);
    const keysIn = async (who?: Who) => {
      const text = (await as(who, "GET", "/metrics")).text;
      expect(text).toMatch(/^llamadock_requests_total\{/m);
      return [...new Set([...text.matchAll(/^llamadock_key_\w+\{key="([^"]+)"/gm)].map((m) => m[1]))].sort();
    };
    expect(await keysIn("admin")).toEqual(["boss", "plain"]);
    expect(await keysIn("plain")).toEqual(["plain"]);
    expect(await keysIn(undefined)).toEqual([]);
  });

  it("on the Unix socket a plain key is an admin (its peer is trusted, and could send none), its usage still its own", async () => {
    const socket = { socketPath: stack.socket };
    const plain = { authorization: `Bearer ${KEYS.plain}` };
    const unloaded = await ask(socket, "POST", "/engines/unload", { models: ["ai/none"] }, plain);
    expect(unloaded.status, unloaded.body).toBe(200);
    const usage = (await ask(socket, "GET", "/engines/usage?by=key", undefined, plain)).json();
    expect(usage.caller).toBe("plain");
    expect(usage.data.map((r: { key: string }) => r.key).sort()).toEqual(["boss", "plain"]);
    // Over TCP the same key is refused, and sees its own rows.
    expect((await as("plain", "POST", "/engines/unload", { models: ["ai/none"] })).status).toBe(403);
    expect((await as("plain", "GET", "/engines/usage?by=key")).json().data.map((r: { key: string }) => r.key)).toEqual(["plain"]);
  });
});

describe("who may call what: every row of the access table, with a plain key and an admin key", () => {
  it("has a case here for every row, and a row for every case", () => {
    expect(CASES.map(([row]) => row).sort()).toEqual(ACCESS.map((r) => `${r.method} ${r.path}`).sort());
  });

  it.each(CASES)("%s", async (row, { call, status, unchanged, done }) => {
    const admin = ACCESS.find((r) => `${r.method} ${r.path}` === row)!.access === "admin";
    const plain = await call("plain");
    if (admin) {
      expect(plain.status, plain.text).toBe(403);
      // Ollama's routes answer in Ollama's shape.
      const error = plain.json().error;
      if (row.includes(" /api/")) expect(error).toMatch(/ takes an admin key: /);
      else expect(error).toMatchObject({ type: "permission_error", code: "admin_only", message: expect.stringMatching(/ takes an admin key: /) });
      await unchanged!();
    } else {
      expect(plain.status, plain.text).toBe(status);
    }
    const boss = await call("admin");
    expect(boss.status, boss.text).toBe(status);
    if (!admin) return;
    // A streamed answer (a pull's, a push's) ends with its success line.
    if (/\n\{"type":/.test(`\n${boss.text}`)) expect(boss.text.trim().split("\n").at(-1)).toMatch(/"type":"success"/);
    await done!();
  }, 120_000);
});

describe("without keys (a desktop)", () => {
  it("everyone may do everything, as before", async () => {
    await stack.restart();
    expect((await as(undefined, "POST", "/models/create", { from: "ai/extra" })).status).toBe(200);
    expect((await as(undefined, "POST", "/engines/unload", { all: true })).status).toBe(200);
    expect((await as(undefined, "DELETE", "/models/purge")).status).toBe(200);
  });
});

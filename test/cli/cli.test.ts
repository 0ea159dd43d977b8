import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { MODEL_MEDIA, pushModel, startRegistry, type Registry } from "../support/registry.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";
import { inTerminal, llamadock, startLlamadock, tmuxSession } from "./command.ts";

// Every subcommand of `llamadock`, run as users run it (the package's bin, a child process) against
// a real model runner whose models come from a real registry, with real llama-server runners.

let stack: Stack;
let fresh: Registry;
let env: Record<string, string>;

beforeAll(async () => {
  [stack, fresh] = await Promise.all([startStack({ models: ["ai/tiny"] }), startRegistry()]);
  // Models the store does not have yet, for the pulls; a few MiB so that a pull takes a moment.
  for (const [i, name] of ["ai/piped", "ai/termed", "ai/resumed"].entries()) {
    const license = new Uint8Array(4 << 20).fill(i + 1); // no blob shared: each pull downloads its own
    await pushModel(fresh, name, "latest", tinyLlamaGguf({ seed: 20 + i }), { layers: [{ mediaType: MODEL_MEDIA.license, data: license }] });
  }
  env = { MODEL_RUNNER_SOCK: stack.socket };
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  await fresh?.stop();
});

describe("help", () => {
  it("lists every subcommand, and each answers --help with status 0", async () => {
    const { code, stdout } = await llamadock(["--help"], env);
    expect(code).toBe(0);
    for (const name of ["serve", "pull", "ls", "rm", "tag", "inspect", "df", "purge", "push", "package", "run", "ps", "unload", "configure", "fit", "launch", "logs", "status", "version"]) {
      expect(stdout).toMatch(new RegExp(`^  ${name}\\b`, "m"));
      const help = await llamadock([name, "--help"], env);
      expect(help.code, name).toBe(0);
      expect(help.stdout).toContain(`Usage: llamadock ${name}`);
    }
  });

  it("an unknown subcommand or a missing argument is status 1 with the usage", async () => {
    expect((await llamadock(["fly"], env)).code).toBe(1);
    const missing = await llamadock(["pull"], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("missing required argument 'model'");
  });
});

describe("talking to the server", () => {
  it("status and version over the Unix socket (the default) and over TCP (--host, MODEL_RUNNER_HOST)", async () => {
    const status = await llamadock(["status"], env);
    expect(status).toMatchObject({ code: 0 });
    expect(status.stdout).toContain(`Docker Model Runner is running (unix:${stack.socket})`);
    expect(status.stdout).toMatch(/^llama\.cpp: Running: llama\.cpp /m);
    const version = await llamadock(["--host", stack.url, "version"], {});
    expect(version).toMatchObject({ code: 0, stdout: "Client: llamadock 0.1.0\nServer: llamadock 0.1.0\n" });
    expect((await llamadock(["status"], { MODEL_RUNNER_HOST: stack.url })).stdout).toContain(`running (${stack.url})`);
  });

  it("no server: status 1 and how to start one", async () => {
    const gone = await llamadock(["ls"], { MODEL_RUNNER_SOCK: join(tmpdir(), "no-such-runner.sock") });
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/cannot reach the model runner at unix:.*no-such-runner\.sock .*Start it with `llamadock serve`/);
    expect((await llamadock(["version"], { MODEL_RUNNER_SOCK: "/nonexistent.sock" })).stdout).toContain("Server: not reachable");
  });
});

describe("models", () => {
  it("ls: a table of name, id, parameters, quantization, size, created", async () => {
    const { code, stdout } = await llamadock(["ls"], env);
    expect(code).toBe(0);
    const [header, ...rows] = stdout.trimEnd().split("\n");
    expect(header).toMatch(/^MODEL NAME\s+ID\s+PARAMETERS\s+QUANTIZATION\s+SIZE\s+CREATED$/);
    const id = (await ask({ url: stack.url }, "GET", "/models/ai/tiny")).json().id.slice(7, 19);
    expect(rows.find((r) => r.includes(id))).toMatch(/^ai\/tiny:latest\s+[0-9a-f]{12}\s+\S+.*\s+(\S+ ago|just now)$/);
    expect((await llamadock(["ls", "-q"], env)).stdout).toBe(`${id}\n`);
    expect(JSON.parse((await llamadock(["ls", "--json"], env)).stdout)[0].tags).toEqual(["ai/tiny:latest"]);
  });

  it("inspect prints the model's JSON record; an unknown model says how to pull it", async () => {
    const { code, stdout } = await llamadock(["inspect", "ai/tiny"], env);
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toMatchObject({ tags: ["ai/tiny:latest"], config: { format: "gguf" } });
    const missing = await llamadock(["inspect", "ai/nope"], env);
    expect(missing).toMatchObject({ code: 1, stdout: "" });
    expect(missing.stderr).toBe("llamadock: model ai/nope not found: pull it first with `llamadock pull ai/nope`\n");
  });

  it("tag then rm: the new name appears, then goes; rm of a missing model is status 1 but removes the others", async () => {
    const tagged = await llamadock(["tag", "ai/tiny", "mine/tiny:v1"], env);
    expect(tagged).toMatchObject({ code: 0, stdout: "Model ai/tiny tagged as mine/tiny:v1\n" });
    expect((await llamadock(["ls"], env)).stdout).toMatch(/^mine\/tiny:v1\s/m);
    const removed = await llamadock(["rm", "mine/tiny:v1", "ai/nope"], env);
    expect(removed.code).toBe(1);
    expect(removed.stdout).toBe("Untagged: mine/tiny:v1\n");
    expect(removed.stderr).toContain("model ai/nope not found");
    expect((await llamadock(["ls"], env)).stdout).not.toContain("mine/tiny");
  });

  it("df shows the store's disk use", async () => {
    expect((await ask({ url: stack.url }, "GET", "/engines/df")).status).toBe(200);
    const df = await llamadock(["df"], env);
    expect(df.code).toBe(0);
    expect(df.stdout).toMatch(/^TYPE\s+SIZE\nModels\s+\d/);
  });
});

describe("pull", () => {
  it("in a pipe: plain lines per layer, then success, status 0", async () => {
    const { code, stdout } = await llamadock(["pull", `${fresh.host}/ai/piped`], env);
    expect(code).toBe(0);
    const lines = stdout.trimEnd().split("\n");
    expect(lines.at(-1)).toBe("Model pulled successfully");
    expect(lines.filter((l) => / done$/.test(l))).toHaveLength(2);
    expect(lines.every((l) => /^[0-9a-f]{12}: [\d.]+ [kMG]?B \/ [\d.]+ [kMG]?B \(\d+%\)( done)?$/.test(l) || l === lines.at(-1))).toBe(true);
    expect(stdout).not.toContain("\x1b");
    // Pulled again: the store has it.
    expect((await llamadock(["pull", `${fresh.host}/ai/piped`], env)).stdout).toContain("Using cached model");
  });

  it("on a terminal: a progress bar per layer with bytes, speed and ETA", async () => {
    const { code, stdout } = await inTerminal(["pull", `${fresh.host}/ai/termed`], env);
    expect(code, stdout).toBe(0);
    const bars = stdout.split(/\r|\n/).filter((l) => /[0-9a-f]{12} \[█{12}\] 100% [\d.]+ [kMG]?B\/[\d.]+ [kMG]?B [\d.]+ [kMG]?B\/s ETA 0s/.test(l));
    expect(new Set(bars.map((l) => l.slice(l.search(/[0-9a-f]{12}/), 12)))).toHaveProperty("size", 2);
    expect(stdout).toContain("Model pulled successfully");
    expect(stdout).toContain("\x1b[?25l"); // the bars hide the cursor: a terminal display
  });

  it("an unknown model: status 1 and the registry's reason", async () => {
    const missing = await llamadock(["pull", `${fresh.host}/ai/absent`], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^llamadock: .*ai\/absent/);
  });

  it("Ctrl-C cancels (status 130), and the next pull resumes where it stopped", async () => {
    const stalling: Front = await startRegistryFront(fresh.url, { stallBlobsAfter: 1 << 20 });
    const plain: Front = await startRegistryFront(fresh.url);
    try {
      const pulling = startLlamadock(["pull", `${stalling.host}/ai/resumed`], env);
      // The license layer has begun, and its first mebibyte is on its way before the registry stalls.
      await pulling.waitForOutput(/ \/ 4\.19 MB/, 30_000);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      pulling.child.kill("SIGINT");
      expect(await pulling.exited).toBe(130);
      expect(pulling.output()).toContain(`pull of ${stalling.host}/ai/resumed cancelled: run \`llamadock pull ${stalling.host}/ai/resumed\` again to resume it`);
      const again = await llamadock(["pull", `${plain.host}/ai/resumed`], env);
      expect(again.stdout).toContain("Model pulled successfully");
      expect(plain.requests.some((r) => /blobs\/sha256:\w+ bytes=[1-9]\d*-$/.test(r))).toBe(true);
    } finally {
      await stalling.stop();
      await plain.stop();
    }
  });
});

describe("runners", () => {
  it("run MODEL PROMPT: says it is loading, streams the answer, exits 0; loaded, it says nothing of loading", async () => {
    await llamadock(["unload", "--all"], env);
    const first = await llamadock(["run", "-n", "8", "-p", "ignore_eos=true", "-p", "temperature=0", "ai/tiny", "Say", "hello"], env);
    expect(first.code).toBe(0);
    expect(first.stderr).toBe("Loading ai/tiny...\n");
    expect(first.stdout.length).toBeGreaterThan(1);
    expect(first.stdout.endsWith("\n")).toBe(true);
    const second = await llamadock(["run", "-n", "8", "-p", "ignore_eos=true", "-p", "temperature=0", "ai/tiny"], env, "from stdin\n");
    expect(second).toMatchObject({ code: 0, stderr: "" });
    expect(second.stdout.length).toBeGreaterThan(1);
  });

  it("run of a model not in the store: status 1 and how to pull it", async () => {
    const missing = await llamadock(["run", "ai/nope", "hi"], env);
    expect(missing).toMatchObject({ code: 1, stderr: "llamadock: model ai/nope not found: pull it first with `llamadock pull ai/nope`\n" });
  });

  it("ps lists the loaded runner; configure, logs, unload", async () => {
    const ps = await llamadock(["ps"], env);
    expect(ps.code).toBe(0);
    expect(ps.stdout).toMatch(/^MODEL NAME\s+MODE\s+STATE\s+ENGINE\s+IN USE\s+QUEUE\s+KEEP ALIVE\s+LAST USED\s+MEMORY\s+PROMPT CACHES\nai\/tiny:latest\s+completion\s+ready\s+builtin\s+0\s+0\s+5m\s+(just now|\d+ \w+ ago)\s+[\d.]+ [kMG]?B \(\w+\)\s+[\d.]+ [kMG]?B of it prompt caches\n$/);

    const configured = await llamadock(["configure", "ai/tiny", "--context-size", "256", "--keep-alive", "10m"], env);
    expect(configured).toMatchObject({ code: 0, stdout: 'Configured ai/tiny:latest: {"context-size":256,"keep_alive":"10m"}\n' });
    await until(async () => /ready\s+builtin\s+0\s+0\s+10m/.test((await llamadock(["ps"], env)).stdout), "the runner reloaded with keep-alive 10m");
    expect((await llamadock(["configure", "ai/tiny", "--context-size", "big"], env)).stderr).toContain("expected a whole number");

    const logs = await llamadock(["logs", "ai/tiny"], env);
    expect(logs.code).toBe(0);
    expect(logs.stdout).toMatch(/n_ctx\w*\s*=\s*256/); // llama-server's own log of the reloaded runner
    expect((await llamadock(["logs", "ai/nope"], env)).stderr).toContain("pull it first");

    const following = startLlamadock(["logs", "-f", "ai/tiny"], env);
    await following.waitForOutput(/n_ctx/);
    await llamadock(["run", "-n", "2", "ai/tiny", "more"], env);
    await following.waitForOutput(/n_ctx[\s\S]*print_timing/); // the request's lines, appended
    following.child.kill("SIGTERM");
    await following.exited;

    // -1: the model's own context.
    expect((await llamadock(["configure", "ai/tiny", "--context-size", "-1"], env)).stdout).toBe('Configured ai/tiny:latest: {"context-size":0,"keep_alive":"10m"}\n');

    expect((await llamadock(["unload"], env))).toMatchObject({ code: 1, stderr: "llamadock: name the models to unload, or pass --all\n" });
    expect(await llamadock(["unload", "ai/tiny"], env)).toMatchObject({ code: 0, stdout: "Unloaded 1 runner\n" });
    expect((await llamadock(["ps"], env)).stdout.trimEnd().split("\n")).toHaveLength(1);
  });

  it("run without a prompt on a terminal: a chat, where Ctrl-C stops an answer, not the chat, and /bye leaves", async () => {
    // Room for three questions: the tiny model's 512 tokens of context in each of the 4 slots.
    await llamadock(["configure", "ai/tiny", "--context-size", "2048"], env);
    const pane = await tmuxSession(`llamadock-cli-${process.pid}`, ["run", "-n", "20", "-p", "ignore_eos=true", "ai/tiny"], env);
    try {
      await pane.waitFor(/Chatting with ai\/tiny\. Type \/bye to leave\.\n>>>$/, "the chat's prompt");
      await pane.keys("first question", "Enter");
      await pane.waitFor(/>>> first question\n.+[\s\S]*\n\n>>>$/, "an answer, then the prompt again");
      // The runner frozen (SIGSTOP): the next answer is pending for as long as the test needs.
      const runners = await stack.runnerPids();
      expect(runners).toHaveLength(1);
      runners.forEach((pid) => process.kill(pid, "SIGSTOP"));
      try {
        await pane.keys("second question", "Enter");
        await pane.waitFor(/>>> second question$/, "the question sent");
        await new Promise((resolve) => setTimeout(resolve, 300));
        await pane.keys("C-c");
        await pane.waitFor(/>>> second question\n \[interrupted\]\n\n>>>$/, "the answer stopped, the chat still there");
      } finally {
        runners.forEach((pid) => process.kill(pid, "SIGCONT"));
      }
      // Ctrl-C at the prompt says how to leave instead of leaving.
      await pane.keys("C-c");
      await pane.waitFor(/Use Ctrl \+ d or \/bye to exit\.\n>>>$/, "the hint");
      await pane.keys("third question", "Enter");
      await pane.waitFor(/>>> third question\n.+[\s\S]*\n\n>>>$/, "the chat goes on");
      await pane.keys("/bye", "Enter");
      await pane.waitFor(/\[exit 0\]$/, "the command to leave with status 0");
    } finally {
      await pane.kill();
    }
    const other = await tmuxSession(`llamadock-cli-${process.pid}-d`, ["run", "ai/tiny"], env);
    try {
      await other.waitFor(/>>>$/, "the chat's prompt");
      await other.keys("C-d");
      await other.waitFor(/\[exit 0\]$/, "Ctrl-D to leave too");
    } finally {
      await other.kill();
    }
  });
});

describe("serve", () => {
  it("starts the server with the settings given as for npm start", async () => {
    const dir = await mkdtemp(join(tmpdir(), "llamadock-serve-"));
    const socket = join(dir, "s.sock");
    const server = startLlamadock(["serve", "--runner.port=0", "--services=runner"], { RUNNER_SOCKET: socket, MODELS_PATH: join(dir, "models"), INFERENCE_RUNTIME_DIR: join(dir, "run") });
    try {
      await server.waitForOutput(/model runner service listening on unix:/);
      expect(server.output()).not.toContain("album");
      const ls = await llamadock(["ls"], { MODEL_RUNNER_SOCK: socket });
      expect(ls).toMatchObject({ code: 0, stdout: "MODEL NAME  ID  PARAMETERS  QUANTIZATION  SIZE  CREATED\n" });
    } finally {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { albumOf, startPhotoService, type PhotoService } from "../album/photo-service.ts";
import { ask } from "../support/http.ts";
import { projectRoot, runtimeBinary, startServer, watch, type RuntimeName, type ServerProcess } from "../support/server-process.ts";

// The package as users get it: `npm pack` (which builds dist/lib), installed in an empty project
// (offline: its dependencies are copied from this checkout's node_modules), then docs/library.md's
// examples, taken from the page, run there on Node, Bun and Deno: the mounted services answer as
// the standalone server does, the default-export modules serve under `bun` and `deno serve`, the
// test by fetch passes, the declarations type-check, and the bin runs.

const KEY = "sk-library-test";
let project = "";
let photos: PhotoService;
let standalone: ServerProcess;
let standaloneUrls: { album: string; runner: string };
const homes: string[] = [];

/** The code blocks of docs/library.md that name a file (```js server.mjs), by that name. */
function examples(): Record<string, string> {
  const page = readFileSync(join(projectRoot, "docs", "library.md"), "utf8");
  return Object.fromEntries([...page.matchAll(/^```\w+ (\S+)\n([\s\S]*?)^```$/gm)].map((m) => [m[1]!, m[2]!]));
}

/** This checkout's installed copy of each package `names` needs, with theirs (node_modules is flat). */
function dependencyClosure(names: string[]): string[] {
  const seen = new Set<string>();
  const todo = [...names];
  while (todo.length) {
    const name = todo.pop()!;
    if (seen.has(name)) continue;
    seen.add(name);
    const manifest = JSON.parse(readFileSync(join(projectRoot, "node_modules", name, "package.json"), "utf8"));
    todo.push(...Object.keys(manifest.dependencies ?? {}));
  }
  return [...seen];
}

function run(command: string, args: string[], cwd: string) {
  const done = spawnSync(command, args, { cwd, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
  expect(done.status, `${command} ${args.join(" ")}\n${done.stdout}\n${done.stderr}`).toBe(0);
  return done.stdout;
}

/** A fresh home folder: each server's store and state apart from the others'. */
function home(): string {
  const dir = mkdtempSync(join(tmpdir(), "llamadock-home-"));
  homes.push(dir);
  return dir;
}

const settingsEnv = () => ({ HOME: home(), PHOTOS_API_BASE_URL: photos.url, API_KEYS: KEY, NO_COLOR: "1" });

/** Starts `args` under `runtime` in the project, as a user would, and waits for `ready`. */
async function startInProject(runtime: RuntimeName, args: string[], env: Record<string, string>, ready: RegExp): Promise<ServerProcess> {
  const path = `${join(projectRoot, "node_modules", ".bin")}:${process.env.PATH}`;
  const child = spawn(runtimeBinary(runtime), args, { cwd: project, env: { ...process.env, ...env, PATH: path }, stdio: ["ignore", "pipe", "pipe"] });
  const server = watch(child);
  try {
    await server.waitForOutput(ready, 60_000);
  } catch (error) {
    await server.stop(1_000);
    throw error;
  }
  return server;
}

const listenUrl = (server: ServerProcess, pattern: RegExp) => pattern.exec(server.output())![1]!.replace("0.0.0.0", "127.0.0.1");

type Seen = { status: number; type: string | undefined; allowOrigin: string | undefined; body: string };

/** What each of a set of calls answers: refusals of the guard, errors, and answers, on either service. */
async function answers(album: string, runner: string): Promise<Seen[]> {
  const key = { authorization: `Bearer ${KEY}` };
  const calls: [string, string, string, object | undefined, Record<string, string>][] = [
    [album, "GET", "/api/albums/1", undefined, {}],
    [album, "GET", "/api/albums/abc", undefined, {}],
    [album, "GET", "/api/albums/1", undefined, { host: "evil.example" }],
    [album, "GET", "/api/albums/1", undefined, { origin: "https://evil.example" }],
    [album, "GET", "/api/albums/1", undefined, { origin: "http://localhost:5173" }],
    [album, "GET", "/api/nothing", undefined, {}],
    [runner, "GET", "/v1/models", undefined, {}],
    [runner, "GET", "/v1/models", undefined, key],
    [runner, "GET", "/models", undefined, key],
    [runner, "GET", "/livez", undefined, {}],
    [runner, "GET", "/v1/models", undefined, { ...key, host: "evil.example" }],
    [runner, "OPTIONS", "/v1/chat/completions", undefined, { origin: "http://localhost:5173", "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" }],
    [runner, "POST", "/v1/chat/completions", { model: "ai/absent", messages: [{ role: "user", content: "hi" }] }, key],
    [runner, "POST", "/v1/chat/completions", { model: "ai/absent" }, key],
  ];
  const seen: Seen[] = [];
  for (const [base, method, path, body, headers] of calls) {
    const url = new URL(base);
    const answer = await ask({ url: url.origin }, method, `${url.pathname.replace(/\/$/, "")}${path}`, body, headers);
    // The media type: Bun's own server adds a charset to JSON, the standalone server on Node does not.
    seen.push({ status: answer.status, type: answer.headers["content-type"]?.replace(/;\s*charset=utf-8$/i, ""), allowOrigin: answer.headers["access-control-allow-origin"] as string | undefined, body: answer.body });
  }
  return seen;
}

beforeAll(async () => {
  photos = await startPhotoService(albumOf(3));
  standalone = await startServer({
    runtime: "node",
    env: { ...settingsEnv(), ALBUM_PORT: "0", RUNNER_PORT: "0", RUNNER_SOCKET: "none" },
    ready: [/album service listening/, /model runner service listening/],
  });
  standaloneUrls = {
    album: /album service listening on (http:\/\/[\d.:]+)/.exec(standalone.output())![1]!,
    runner: /model runner service listening on (http:\/\/[\d.:]+)/.exec(standalone.output())![1]!,
  };

  const packed = mkdtempSync(join(tmpdir(), "llamadock-pack-"));
  homes.push(packed);
  const tarball = run("npm", ["pack", "--silent", "--pack-destination", packed], projectRoot).trim().split("\n").pop()!;
  project = mkdtempSync(join(tmpdir(), "llamadock-user-"));
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "user-app", private: true, type: "module" }));
  // npm finds them installed and fetches nothing; @types/node after, for the user's own type
  // check (npm would remove it: nothing there depends on it).
  const copy = (names: string[]) => {
    for (const name of dependencyClosure(names)) cpSync(realpathSync(join(projectRoot, "node_modules", name)), join(project, "node_modules", name), { recursive: true });
  };
  copy(Object.keys(manifest().dependencies));
  run("npm", ["install", "--offline", "--ignore-scripts", "--no-audit", "--no-fund", join(packed, tarball)], project);
  copy(["@types/node"]);
  for (const [name, code] of Object.entries(examples())) writeFileSync(join(project, name), code);
  cpSync(join(projectRoot, "test", "library", "fixtures", "consumer"), project, { recursive: true });
}, 300_000);

afterAll(async () => {
  await standalone?.stop(10_000);
  await photos?.close();
  if (project) rmSync(project, { recursive: true, force: true });
  for (const dir of homes) rmSync(dir, { recursive: true, force: true });
});

describe("the package, installed from its tarball", () => {
  it("holds the built JavaScript and declarations, the TypeScript, and the examples were found", () => {
    const installed = join(project, "node_modules", "llamadock");
    for (const entry of ["index", "album", "model-runner", "config", "node", "album-serve", "model-runner-serve"]) {
      expect(existsSync(join(installed, "dist", "lib", "src", "library", `${entry}.js`)), entry).toBe(true);
      expect(existsSync(join(installed, "dist", "lib", "src", "library", `${entry}.d.ts`)), entry).toBe(true);
    }
    expect(readdirSync(join(installed, "dist", "lib", "src", "web", "assets"))).toContain("index.html");
    expect(existsSync(join(installed, "src", "cli", "main.ts"))).toBe(true);
    expect(Object.keys(examples()).sort()).toEqual(["album.test.mjs", "album.ts", "runner.ts", "server.mjs", "server.ts"]);
  });

  it("type-checks a user's TypeScript against its declarations", () => {
    const tsc = join(projectRoot, "node_modules", "typescript", "bin", "tsc");
    run(runtimeBinary("node"), [tsc, "-p", "tsconfig.json"], project);
  });

  it("runs its bin, the llamadock command", () => {
    const path = `${join(projectRoot, "node_modules", ".bin")}:${process.env.PATH}`;
    const done = spawnSync(join(project, "node_modules", ".bin", "llamadock"), ["--version"], { cwd: project, encoding: "utf8", env: { ...process.env, PATH: path } });
    expect(done.stdout.trim(), done.stderr).toBe(manifest().version);
  });

  const mounted: [RuntimeName, string[]][] = [
    ["node", ["server.mjs"]],
    ["bun", ["server.mjs"]],
    ["deno", ["run", "--allow-all", "server.ts"]],
  ];
  for (const [runtime, args] of mounted) {
    it(`mounted under /album and /llm in the docs' app on ${runtime}: the standalone server's answers, then a clean stop`, async () => {
      const app = await startInProject(runtime, args, { ...settingsEnv(), PORT: "0" }, /listening on/);
      try {
        const url = listenUrl(app, /listening on (http:\/\/[\d.:]+)/);
        const own = await ask({ url }, "GET", "/");
        expect(own.body).toBe("my own app\n");
        const expected = await answers(standaloneUrls.album, standaloneUrls.runner);
        expect(expected[0]!.status).toBe(200); // the photos came through, not an error twice
        expect(await answers(`${url}/album`, `${url}/llm`)).toEqual(expected);
      } finally {
        expect(await app.stop(20_000)).toBe(0);
      }
    });
  }

  const modules: [RuntimeName, string, string[], Record<string, string>][] = [
    ["bun", "album", ["album.ts"], { ALBUM_PORT: "0" }],
    ["deno", "album", ["serve", "--allow-net", "--allow-env", "--port", "0", "album.ts"], {}],
    ["bun", "runner", ["runner.ts"], { RUNNER_PORT: "0" }],
    ["deno", "runner", ["serve", "--allow-all", "--unstable-no-legacy-abort", "--port", "0", "runner.ts"], {}],
  ];
  for (const [runtime, service, args, env] of modules) {
    it(`the ${service} module served by ${runtime === "bun" ? "bun" : "deno serve"}: the standalone server's answers${service === "runner" ? ", drained and stopped on SIGTERM" : ""}`, async () => {
      const server = await startInProject(runtime, args, { ...settingsEnv(), ...env }, /Started server|Listening on/);
      try {
        const url = listenUrl(server, /(?:Started server: |Listening on )(http:\/\/[\d.:]+)/);
        const expected = await answers(standaloneUrls.album, standaloneUrls.runner);
        const seen = await answers(service === "album" ? url : standaloneUrls.album, service === "runner" ? url : standaloneUrls.runner);
        expect(seen).toEqual(expected);
      } finally {
        expect(await server.stop(20_000)).toBe(0);
      }
      expect(server.output()).toMatch(/SIGTERM received[\s\S]*stopped/);
    });
  }

  for (const runtime of ["node", "bun", "deno"] as RuntimeName[]) {
    it(`the docs' test by fetch passes on ${runtime}`, () => {
      const args = runtime === "deno" ? ["run", "--allow-all", "album.test.mjs"] : ["album.test.mjs"];
      expect(run(runtimeBinary(runtime), args, project).trim()).toBe("ok");
    });
  }
});

function manifest(): { version: string; dependencies: Record<string, string> } {
  return JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8"));
}

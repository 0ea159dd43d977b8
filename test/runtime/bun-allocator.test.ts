import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { allocatorAdvice, BUN_ALLOCATOR_ENV } from "../../src/runtime/bun-allocator.ts";
import { launchEnv, projectRoot, startServer, watch, type ServerProcess } from "../support/server-process.ts";
import { BIN } from "../cli/command.ts";

// Every launcher starts our server under Bun with the allocator settings of
// src/runtime/bun-allocator.ts, unless the user set them: what the process itself got, read from
// /proc/<pid>/environ of the running server.

const ALBUM_ONLY = { SERVICES: "album", ALBUM_HOST: "127.0.0.1", ALBUM_PORT: "0", PHOTOS_API_BASE_URL: "http://127.0.0.1:9" };
const READY = /album service listening/;

/** `pid` and the processes under it. */
function tree(pid: string): string[] {
  const file = `/proc/${pid}/task/${pid}/children`;
  const children = existsSync(file) ? readFileSync(file, "utf8").trim().split(/\s+/).filter(Boolean) : [];
  return [pid, ...children.flatMap(tree)];
}

/** The environment of the process that runs our server: `pid`, or the last one under it (npm's shell names it too). */
function serverEnv(pid: number): Map<string, string> {
  const server = tree(String(pid)).findLast((id) => /src\/(index|cli\/main)\.ts/.test(readFileSync(`/proc/${id}/cmdline`, "utf8")));
  if (!server) throw new Error(`no server process at or under ${pid}`);
  const pairs = readFileSync(`/proc/${server}/environ`, "utf8").split("\0").filter(Boolean);
  return new Map(pairs.map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]));
}

/**
 * Starts `command` with `env` over ours, until it listens; its server's environment. In a process
 * group of its own, stopped as a terminal stops it: npm does not pass a SIGTERM of its own on to
 * the shell that runs its script.
 */
async function launched(command: string, args: string[], env: Record<string, string>): Promise<Map<string, string>> {
  const child = spawn(command, args, { cwd: projectRoot, env: { ...withoutAllocatorEnv(process.env), ...env }, stdio: ["ignore", "pipe", "pipe"], detached: true });
  const server: ServerProcess = watch(child);
  try {
    await server.waitForOutput(READY, 30_000);
    return serverEnv(server.pid);
  } finally {
    process.kill(-server.pid, "SIGTERM");
    await server.exited;
  }
}

const fail = (why: string): never => {
  throw new Error(why);
};

const withoutAllocatorEnv = (env: NodeJS.ProcessEnv) => Object.fromEntries(Object.entries(env).filter(([name]) => !(name in BUN_ALLOCATOR_ENV)));

describe("Bun's allocator settings", () => {
  // Without its setup (prestart), which the test command has run already.
  const npmStart = ["start", "--ignore-scripts"];

  it("npm start gives them to the server, and a value the user set wins", async () => {
    const given = await launched("npm", npmStart, ALBUM_ONLY);
    const set = await launched("npm", npmStart, { ...ALBUM_ONLY, ...Object.fromEntries(Object.keys(BUN_ALLOCATOR_ENV).map((name) => [name, "250"])) });
    for (const [name, value] of Object.entries(BUN_ALLOCATOR_ENV)) {
      expect(given.get(name)).toBe(value);
      expect(set.get(name)).toBe("250");
    }
  }, 90_000);

  it("`llamadock serve` gives them too", async () => {
    const env = await launched(BIN, ["serve"], ALBUM_ONLY);
    for (const [name, value] of Object.entries(BUN_ALLOCATOR_ENV)) expect(env.get(name)).toBe(value);
  }, 60_000);

  it("the image sets them in its environment", () => {
    const dockerfile = readFileSync(join(projectRoot, "Dockerfile"), "utf8");
    for (const [name, value] of Object.entries(BUN_ALLOCATOR_ENV)) expect(dockerfile).toMatch(new RegExp(`^\\s+${name}=${value} \\\\$`, "m"));
  });

  it("the tests start our server with them", async () => {
    const ours = await startServer({ runtime: "bun", env: ALBUM_ONLY, ready: [READY] });
    try {
      for (const [name, value] of Object.entries(BUN_ALLOCATOR_ENV)) expect(serverEnv(ours.pid).get(name)).toBe(value);
    } finally {
      await ours.stop(5_000);
    }
  }, 60_000);

  it("a bench's floors and the tests' fixtures start as plain scripts, and Node and Deno without them", () => {
    for (const name of Object.keys(BUN_ALLOCATOR_ENV)) {
      expect(launchEnv({ runtime: "bun", entry: "bench/runtimes/floor.ts" })).not.toHaveProperty(name);
      expect(launchEnv({ runtime: "bun", entry: "test/support/store-writer.ts" })).not.toHaveProperty(name);
      expect(launchEnv({ runtime: "node" })).not.toHaveProperty(name);
      expect(launchEnv({ runtime: "deno" })).not.toHaveProperty(name);
      expect(launchEnv({ runtime: "bun", entry: "src/index.ts", env: { [name]: undefined } })[name]).toBeUndefined();
    }
  });

  it("a server started under Bun without them says how it is started with them; with them, or on Node and Deno, nothing", () => {
    expect(allocatorAdvice("bun", {})).toMatch(/MIMALLOC_PURGE_DELAY=-1/);
    expect(allocatorAdvice("bun", { MIMALLOC_PURGE_DELAY: "100" })).toBeUndefined();
    // Deno with the narrowest permissions refuses to read a variable not allowed: none is read there.
    const refusing = new Proxy({}, { get: () => fail("a variable was read") });
    expect(allocatorAdvice("node", refusing)).toBeUndefined();
    expect(allocatorAdvice("deno", refusing)).toBeUndefined();
  });
});

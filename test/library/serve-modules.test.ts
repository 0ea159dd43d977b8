import { spawn } from "node:child_process";
import type { IncomingMessage, ServerResponse } from "node:http";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { albumOf, startPhotoService, type PhotoService } from "../album/photo-service.ts";
import { ask } from "../support/http.ts";
import { pushModel, startRegistry, type Registry } from "../support/registry.ts";
import { projectRoot, runtimeBinary, watch, type ServerProcess } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// The default-export modules from a checkout, served by the runtime's own server as docs/library.md
// says: `bun <module>` and `deno serve <module>`. The album answers from the photo service behind
// its guard; the model runner pulls a model, starts a real llama-server runner for a completion,
// and on SIGTERM drains, stops that runner and ends the process.

type Way = { name: string; runtime: "bun" | "deno"; args: (module: string) => string[]; port: Record<string, string> };
const WAYS: Way[] = [
  { name: "bun", runtime: "bun", args: (module) => [module], port: {} },
  { name: "deno serve", runtime: "deno", args: (module) => ["serve", "--port", "0", "--unstable-no-legacy-abort", module], port: {} },
];

let photos: PhotoService;
let registry: Registry;
const dirs: string[] = [];

beforeAll(async () => {
  photos = await startPhotoService(albumOf(3));
  registry = await startRegistry();
  await pushModel(registry, "ai/tiny", "latest", tinyLlamaGguf({ seed: 1 }));
}, 120_000);

afterAll(async () => {
  await photos?.close();
  await registry?.stop();
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function serve(way: Way, module: string, permissions: string[], env: Record<string, string>): Promise<{ server: ServerProcess; url: string }> {
  const args = way.runtime === "deno" ? [way.args(module)[0]!, ...permissions, ...way.args(module).slice(1)] : way.args(module);
  const child = spawn(runtimeBinary(way.runtime), args, { cwd: projectRoot, env: { ...process.env, NO_COLOR: "1", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const server = watch(child);
  try {
    await server.waitForOutput(/Started server|Listening on/, 60_000);
  } catch (error) {
    await server.stop(1_000);
    throw error;
  }
  const url = /(?:Started server: |Listening on )(http:\/\/[\d.:]+)/.exec(server.output())![1]!.replace("0.0.0.0", "127.0.0.1");
  return { server, url };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function runnerPids(runDir: string): Promise<number[]> {
  const names = (await readdir(runDir).catch(() => [] as string[])).filter((name) => name.endsWith(".pid"));
  return Promise.all(names.map(async (name) => (JSON.parse(await readFile(join(runDir, name), "utf8")) as { pid: number }).pid));
}

describe("the default-export modules served by the runtime's own server", () => {
  for (const way of WAYS) {
    it(`the album under ${way.name}, with --allow-net --allow-env on Deno: photos, and the guard`, async () => {
      const { server, url } = await serve(way, "src/library/album-serve.ts", ["--allow-net", "--allow-env"], { PHOTOS_API_BASE_URL: photos.url, ALBUM_PORT: "0" });
      try {
        const album = await ask({ url }, "GET", "/api/albums/7");
        expect(album.status).toBe(200);
        expect(album.json()).toMatchObject({ albumId: 7, photos: [{ id: 1 }, { id: 2 }, { id: 3 }] });
        const foreign = await ask({ url }, "GET", "/api/albums/7", undefined, { host: "evil.example" });
        expect(foreign.status).toBe(403);
        expect(foreign.json().error.code).toBe("host_not_allowed");
      } finally {
        expect(await server.stop(10_000)).toBe(0);
      }
    });

    if (way.runtime === "bun") {
      it("the album under bun keeps the standalone server's cap: past HTTP_MAX_CONNECTIONS requests in flight, 503", async () => {
        const calls: [IncomingMessage, ServerResponse][] = [];
        photos.answerWith((request, response) => void calls.push([request, response]));
        const { server, url } = await serve(way, "src/library/album-serve.ts", [], { PHOTOS_API_BASE_URL: photos.url, ALBUM_PORT: "0", HTTP_MAX_CONNECTIONS: "2" });
        try {
          const held = [1, 2].map((id) => ask({ url }, "GET", `/api/albums/${id}`));
          await until(() => calls.length === 2, "the two held requests to reach the photo service");
          const extra = await ask({ url }, "GET", "/api/albums/3");
          expect([extra.status, extra.json().error.code]).toEqual([503, "too_many_connections"]);
          for (const [request, response] of calls) albumOf(1)(request, response);
          expect((await Promise.all(held)).map((answer) => answer.status)).toEqual([200, 200]);
        } finally {
          photos.answerWith(albumOf(3));
          expect(await server.stop(10_000)).toBe(0);
        }
      });
    }

    it(`the model runner under ${way.name}: a pull, a completion by a llama-server runner, then SIGTERM stops the runner`, async () => {
      const dir = await mkdtemp(join(tmpdir(), "llamadock-module-"));
      dirs.push(dir);
      const runDir = join(dir, "run");
      const { server, url } = await serve(way, "src/library/model-runner-serve.ts", ["--allow-all"], {
        RUNNER_PORT: "0",
        MODELS_PATH: join(dir, "models"),
        DEFAULT_REGISTRY: registry.host,
        INFERENCE_RUNTIME_DIR: runDir,
        INFERENCE_LOG_DIR: join(dir, "logs"),
        INFERENCE_SETTINGS_PATH: join(dir, "engine-settings.json"),
        INFERENCE_THREADS: "1",
      });
      let pids: number[] = [];
      try {
        const pulled = await ask({ url }, "POST", "/models/create", { from: "ai/tiny" });
        expect(pulled.body).toContain('"success"');
        const completion = await ask({ url }, "POST", "/engines/llama.cpp/v1/completions", { model: "ai/tiny", prompt: "hi", max_tokens: 2 });
        expect(completion.status, completion.body).toBe(200);
        expect(completion.json().choices).toHaveLength(1);
        pids = await runnerPids(runDir);
        expect(pids).toHaveLength(1);
        expect(alive(pids[0]!)).toBe(true);
      } finally {
        expect(await server.stop(20_000)).toBe(0);
      }
      expect(server.output()).toMatch(/SIGTERM received: finishing in-flight requests[\s\S]*stopped/);
      expect(pids.filter(alive)).toEqual([]);
    });
  }
});

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { ConfigError, loadConfig } from "../src/config.ts";

describe("config", () => {
  it("has sensible defaults", () => {
    const config = loadConfig({}, []);
    expect(config.album).toEqual({
      host: "127.0.0.1",
      port: 8080,
      photosBaseUrl: "https://jsonplaceholder.typicode.com",
      photosTimeoutMs: 10_000,
      photosMaxBytes: 4 * 1024 * 1024,
    });
  });

  it("takes the base URL from the env, and the command-line property over it", () => {
    const env = { PHOTOS_API_BASE_URL: "http://env.example" };
    expect(loadConfig(env, []).album.photosBaseUrl).toBe("http://env.example");
    const argv = ["--photos.api.base-url=http://arg.example/v1/"];
    expect(loadConfig(env, argv).album.photosBaseUrl).toBe("http://arg.example/v1");
  });

  it("listens for the album service on a Unix socket only when asked", () => {
    expect(loadConfig({}, []).album.socketPath).toBeUndefined();
    expect(loadConfig({ ALBUM_SOCKET: "/run/a.sock" }, []).album.socketPath).toBe("/run/a.sock");
    expect(loadConfig({}, ["--album.socket=/run/b.sock"]).album.socketPath).toBe("/run/b.sock");
  });

  it("keeps a path prefix and drops trailing slashes", () => {
    expect(loadConfig({ PHOTOS_API_BASE_URL: "http://h:9/api//" }, []).album.photosBaseUrl).toBe("http://h:9/api");
  });

  it.each([
    [{ PHOTOS_API_BASE_URL: "not a url" }, []],
    [{ PHOTOS_API_BASE_URL: "ftp://h/" }, []],
    [{ PHOTOS_API_BASE_URL: "http://h/?q=1" }, []],
    [{ ALBUM_PORT: "70000" }, []],
    [{ ALBUM_PORT: "http" }, []],
    [{}, ["--no-such.setting=1"]],
    [{}, ["positional"]],
  ])("rejects %j %j with a clear message", (env, argv) => {
    expect(() => loadConfig(env, argv)).toThrow(ConfigError);
  });
});

describe("Docker Model Runner's setting names", () => {
  it("MODEL_RUNNER_PORT, MODEL_RUNNER_SOCK and a bare MODEL_RUNNER_HOST set the listeners", () => {
    const config = loadConfig({ MODEL_RUNNER_PORT: "13000", MODEL_RUNNER_SOCK: "/run/dmr.sock", MODEL_RUNNER_HOST: "0.0.0.0", API_KEYS: "k" }, []);
    expect(config.runner).toEqual({ host: "0.0.0.0", port: 13000, socketPath: "/run/dmr.sock" });
    expect(loadConfig({}, ["--model.runner.port=13001"]).runner.port).toBe(13001);
  });

  it("MODEL_RUNNER_HOST as a URL is the clients' setting, not a listen address", () => {
    expect(loadConfig({ MODEL_RUNNER_HOST: "http://localhost:12434" }, []).runner.host).toBe("127.0.0.1");
  });

  it("both spellings agreeing is fine; disagreeing stops start-up with one line naming both", () => {
    expect(loadConfig({ MODEL_RUNNER_PORT: "13000", RUNNER_PORT: "13000" }, []).runner.port).toBe(13000);
    expect(() => loadConfig({ MODEL_RUNNER_PORT: "13000", RUNNER_PORT: "14000" }, [])).toThrow(
      new ConfigError("MODEL_RUNNER_PORT=13000 and RUNNER_PORT=14000 disagree: set one of them"),
    );
    expect(() => loadConfig({ MODEL_RUNNER_SOCK: "/a.sock" }, ["--runner.socket=/b.sock"])).toThrow(/MODEL_RUNNER_SOCK.*RUNNER_SOCKET/);
    expect(() => loadConfig({ RUNNER_HOST: "127.0.0.1", MODEL_RUNNER_HOST: "0.0.0.0" }, [])).toThrow(/MODEL_RUNNER_HOST.*RUNNER_HOST/);
  });
});

describe("security settings", () => {
  it("refuses to serve the model runner on a non-loopback address without a key, in one line", () => {
    expect(() => loadConfig({ RUNNER_HOST: "0.0.0.0" }, [])).toThrow(/^the model runner would listen on 0\.0\.0\.0 with no API key: set API_KEYS/);
    expect(loadConfig({ RUNNER_HOST: "0.0.0.0", API_KEYS: "k1, k2" }, []).security.apiKeys).toEqual(["k1", "k2"]);
    expect(loadConfig({ RUNNER_HOST: "0.0.0.0", ALLOW_UNAUTHENTICATED_REMOTE: "true" }, []).security.apiKeys).toEqual([]);
    expect(loadConfig({ RUNNER_HOST: "0.0.0.0", SERVICES: "album" }, []).services).toEqual(["album"]);
  });

  it("reads keys from API_KEYS_FILE, one a line, and says when it cannot", () => {
    const dir = mkdtempSync(join(tmpdir(), "llamadock-keys-"));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, "keys");
    writeFileSync(file, "# team keys\nalpha\n\n beta \n");
    expect(loadConfig({ API_KEYS: "gamma", API_KEYS_FILE: file }, []).security.apiKeys).toEqual(["gamma", "alpha", "beta"]);
    expect(() => loadConfig({ API_KEYS_FILE: `${file}.missing` }, [])).toThrow(/cannot read API_KEYS_FILE/);
  });

  it("adds ALLOWED_ORIGINS, DMR_ORIGINS and OLLAMA_ORIGINS to the local defaults", () => {
    const origins = loadConfig({ ALLOWED_ORIGINS: "https://a.example", DMR_ORIGINS: "https://b.example", OLLAMA_ORIGINS: "https://c.example" }, []).security.allowedOrigins;
    expect(origins).toEqual(expect.arrayContaining(["http://localhost:*", "https://a.example", "https://b.example", "https://c.example"]));
  });

  it("reads the memory settings: sizes with units, a floor for the context, the GPU switch", () => {
    expect(loadConfig({}, []).inference.memory).toEqual({ budget: undefined, reserve: 1024 ** 3, minContext: 4096, gpu: "auto" });
    const set = loadConfig({ INFERENCE_MEMORY_BUDGET: "12GiB", INFERENCE_MEMORY_RESERVE: "512MiB", INFERENCE_MIN_CONTEXT: "2048", INFERENCE_GPU: "off" }, []);
    expect(set.inference.memory).toEqual({ budget: 12 * 1024 ** 3, reserve: 512 * 1024 ** 2, minContext: 2048, gpu: "off" });
    expect(loadConfig({}, ["--inference.memory.budget=1000000"]).inference.memory.budget).toBe(1_000_000);
    expect(() => loadConfig({ INFERENCE_MEMORY_BUDGET: "lots" }, [])).toThrow(/a size like 8GiB[\s\S]*INFERENCE_MEMORY_BUDGET/);
  });

  it("reads the runners' host caches: 1 GiB of prompt cache and 4 checkpoints a slot by default, whole MiB, 0 off", () => {
    const MIB = 1024 ** 2;
    expect(loadConfig({}, []).inference.promptCache).toEqual({ bytes: 1024 * MIB, checkpoints: 4 });
    expect(loadConfig({ INFERENCE_CACHE_RAM: "300MB", INFERENCE_CTX_CHECKPOINTS: "0" }, []).inference.promptCache).toEqual({ bytes: 287 * MIB, checkpoints: 0 });
    expect(loadConfig({ INFERENCE_CACHE_RAM: "0" }, []).inference.promptCache.bytes).toBe(0);
    expect(() => loadConfig({ INFERENCE_CACHE_RAM: "lots" }, [])).toThrow(/INFERENCE_CACHE_RAM/);
    expect(() => loadConfig({ INFERENCE_CTX_CHECKPOINTS: "33" }, [])).toThrow(/INFERENCE_CTX_CHECKPOINTS/);
  });

  it("parks displaced sessions' conversations unless INFERENCE_SLOT_PARKING is false", () => {
    expect(loadConfig({}, []).inference.slotCache.parking).toBe(true);
    expect(loadConfig({ INFERENCE_SLOT_PARKING: "false" }, []).inference.slotCache.parking).toBe(false);
    expect(() => loadConfig({ INFERENCE_SLOT_PARKING: "off" }, [])).toThrow(/INFERENCE_SLOT_PARKING/);
  });

  it("places agent sessions on their slots unless INFERENCE_SESSION_AFFINITY is false", () => {
    expect(loadConfig({}, []).inference.sessionAffinity).toBe(true);
    expect(loadConfig({ INFERENCE_SESSION_AFFINITY: "false" }, []).inference.sessionAffinity).toBe(false);
    expect(() => loadConfig({ INFERENCE_SESSION_AFFINITY: "no" }, [])).toThrow(/INFERENCE_SESSION_AFFINITY/);
  });
});


describe("INFERENCE_BATCH_EVICT_AFTER", () => {
  it("is 5 minutes unless set, a duration like the keep-alive, and never -1 (batch work would wait for good)", () => {
    expect(loadConfig({}, []).inference.batchEvictAfterMs).toBe(300_000);
    expect(loadConfig({ INFERENCE_BATCH_EVICT_AFTER: "90s" }, []).inference.batchEvictAfterMs).toBe(90_000);
    expect(loadConfig({ INFERENCE_BATCH_EVICT_AFTER: "0" }, []).inference.batchEvictAfterMs).toBe(0);
    expect(() => loadConfig({ INFERENCE_BATCH_EVICT_AFTER: "-1" }, [])).toThrow(/never -1[\s\S]*INFERENCE_BATCH_EVICT_AFTER/);
    expect(() => loadConfig({ INFERENCE_BATCH_EVICT_AFTER: "soon" }, [])).toThrow(ConfigError);
  });
});

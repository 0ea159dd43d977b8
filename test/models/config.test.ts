import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.ts";

describe("model management settings", () => {
  it("has defaults", () => {
    const { models } = loadConfig({}, []);
    expect(models).toMatchObject({
      defaultRegistry: "docker.io",
      insecureRegistries: [],
      registryCredentials: {},
      hfEndpoint: "https://huggingface.co",
      pullMaxConcurrent: 2,
      pullStallTimeoutMs: 30_000,
      pullParts: { streams: 8, minBytes: 16 << 20 },
      lockStaleMs: 30_000,
    });
    expect(models.path).toMatch(/models$/);
    expect(models.hfToken).toBeUndefined();
  });

  it("reads the store, registries, credentials, the Hub and the pull limits from the env", () => {
    const { models } = loadConfig(
      {
        MODELS_PATH: "/srv/models",
        DEFAULT_REGISTRY: "LOCALHOST:5000",
        REGISTRY_INSECURE: "reg.lan:5000, other.lan",
        REGISTRY_CREDENTIALS: "reg.lan:5000=me:pa:ss,docker.io=u:p",
        HF_ENDPOINT: "http://hub.lan/",
        HF_TOKEN: "hf_x",
        PULL_MAX_CONCURRENT: "1",
        PULL_STALL_TIMEOUT_MS: "300",
        PULL_PARTS: "1",
        PULL_PART_MIN_BYTES: "1048576",
        STORE_LOCK_STALE_MS: "5000",
      },
      [],
    );
    expect(models).toEqual({
      path: "/srv/models",
      lockStaleMs: 5_000,
      defaultRegistry: "localhost:5000",
      insecureRegistries: ["reg.lan:5000", "other.lan"],
      registryCredentials: { "reg.lan:5000": { username: "me", password: "pa:ss" }, "docker.io": { username: "u", password: "p" } },
      hfEndpoint: "http://hub.lan",
      hfToken: "hf_x",
      pullMaxConcurrent: 1,
      pullStallTimeoutMs: 300,
      pullParts: { streams: 1, minBytes: 1 << 20 },
    });
  });

  it.each([
    { DEFAULT_REGISTRY: "http://x" },
    { REGISTRY_CREDENTIALS: "nohost" },
    { HF_ENDPOINT: "ftp://x" },
    { PULL_MAX_CONCURRENT: "0" },
    { PULL_STALL_TIMEOUT_MS: "soon" },
    { PULL_PARTS: "0" },
    { PULL_PART_MIN_BYTES: "1k" },
    { STORE_LOCK_STALE_MS: "999" },
  ])("rejects %j", (env) => {
    expect(() => loadConfig(env, [])).toThrow(ConfigError);
  });
});

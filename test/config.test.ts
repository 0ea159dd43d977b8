import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../src/config.ts";

describe("config", () => {
  it("has sensible defaults", () => {
    const config = loadConfig({}, []);
    expect(config.album).toEqual({
      host: "127.0.0.1",
      port: 8080,
      photosBaseUrl: "https://jsonplaceholder.typicode.com",
      photosTimeoutMs: 10_000,
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

import { describe, expect, it } from "vitest";
import { createKeyring, KeyFileError, parseKeyFile, parseKeyLine, unnamed } from "../../src/keys/keyring.ts";
import { loadConfig, ConfigError } from "../../src/config.ts";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// Key file lines: a key alone (as before), or with a name, admin and its own limits.

const NONE = { inFlight: 0, requestsPerMinute: 0, tokensPerMinute: 0 };
const request = (key?: string) => new Request("http://localhost/v1/models", key ? { headers: { authorization: `Bearer ${key}` } } : {});

describe("key file lines", () => {
  it.each([
    ["sk-1", { key: "sk-1", name: unnamed("sk-1"), admin: false, limits: {} }],
    ["sk-2 name=alice", { key: "sk-2", name: "alice", admin: false, limits: {} }],
    ["sk-3   name=ops admin in_flight=2 rpm=60 tpm=1000", { key: "sk-3", name: "ops", admin: true, limits: { inFlight: 2, requestsPerMinute: 60, tokensPerMinute: 1000 } }],
    ["abc== name=b64", { key: "abc==", name: "b64", admin: false, limits: {} }],
  ])("%s", (line, entry) => expect(parseKeyLine(line)).toEqual(entry));

  it.each(["sk-1 nmae=x", "sk-1 rpm=-1", "sk-1 name=has/slash", "sk-1 admin=yes", "sk-1 tpm="])("refuses %s, without repeating the key", (line) => {
    expect(() => parseKeyLine(line)).toThrow(KeyFileError);
    try {
      parseKeyLine(line);
    } catch (error) {
      expect((error as Error).message).not.toContain("sk-1");
    }
  });

  it("a name given to two keys is refused; comments and blank lines are skipped", () => {
    expect(parseKeyFile("# team\n\nk1 name=a\nk2\n").map((e) => e.name)).toEqual(["a", unnamed("k2")]);
    expect(() => parseKeyFile("k1 name=a\nk2 name=a")).toThrow(/the name a is given to two keys/);
  });

  it("an unnamed key's name is a digest, not the key", () => {
    expect(unnamed("secret-value")).toMatch(/^key-[0-9a-f]{8}$/);
    expect(unnamed("secret-value")).not.toContain("secret");
  });
});

describe("whom a request speaks for", () => {
  const entries = parseKeyFile("k-alice name=alice admin rpm=5\nk-bob name=bob");
  const keyring = createKeyring(entries, { ...NONE, tokensPerMinute: 100 }, (r) => r.headers.get("x-trusted") === "1");

  it("a key's name and limits, the defaults filling what its line does not set", () => {
    expect(keyring.identify(request("k-alice"))).toEqual({ name: "alice", admin: true, limits: { inFlight: 0, requestsPerMinute: 5, tokensPerMinute: 100 } });
    expect(keyring.identify(request("k-bob"))).toMatchObject({ name: "bob", admin: false });
  });

  it("keyless: local on the trusted socket, anonymous elsewhere; without keys everyone is local", () => {
    expect(keyring.identify(new Request("http://x/", { headers: { "x-trusted": "1" } }))).toMatchObject({ name: "local", admin: true });
    expect(keyring.identify(request())).toMatchObject({ name: "anonymous", admin: false });
    expect(createKeyring([], NONE, () => false).identify(request("anything"))).toMatchObject({ name: "local", admin: true });
  });
});

describe("configuration", () => {
  const dir = mkdtempSync(join(tmpdir(), "llamadock-keys-"));
  it("API_KEYS and API_KEYS_FILE together; the guard gets the keys alone", () => {
    writeFileSync(join(dir, "keys"), "k-file name=team rpm=3\n");
    const config = loadConfig({ API_KEYS: "k-env", API_KEYS_FILE: join(dir, "keys"), KEY_TOKENS_PER_MINUTE: "50" }, []);
    expect(config.security.apiKeys).toEqual(["k-env", "k-file"]);
    expect(config.security.keyEntries.map((e) => e.name)).toEqual([unnamed("k-env"), "team"]);
    expect(config.security.keyDefaults).toEqual({ inFlight: 0, requestsPerMinute: 0, tokensPerMinute: 50 });
  });

  it("a bad line stops the start with the file's name and the key's name", () => {
    writeFileSync(join(dir, "bad"), "k-file name=team rpm=lots\n");
    expect(() => loadConfig({ API_KEYS_FILE: join(dir, "bad") }, [])).toThrow(ConfigError);
    expect(() => loadConfig({ API_KEYS_FILE: join(dir, "bad") }, [])).toThrow(/key team: "rpm=lots"/);
  });

  it("usage is kept beside the settings unless USAGE_PATH says where", () => {
    expect(loadConfig({ INFERENCE_SETTINGS_PATH: "/data/settings.json" }, []).inference.usagePath).toBe("/data/usage.json");
    expect(loadConfig({ USAGE_PATH: "/elsewhere/u.json" }, []).inference.usagePath).toBe("/elsewhere/u.json");
  });
});

import { afterAll, describe, expect, it, onTestFinished } from "vitest";
import { checkKeyEntries, createKeyring, KeyFileError, parseKeyFile, parseKeyLine, unnamed, type KeyEntry } from "../../src/keys/keyring.ts";
import { loadConfig, ConfigError } from "../../src/config.ts";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { commandLine, projectRoot, runtimeBinary } from "../support/server-process.ts";
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

  const entry = (key: string, name: string): KeyEntry => ({ key, name, admin: false, limits: {} });
  it.each([
    ["local: the Unix socket's caller", [entry("sk-x1", "local")], /the name local is reserved \(the Unix socket's caller/],
    ["anonymous: a keyless request's", [entry("sk-x1", "anonymous")], /the name anonymous is reserved \(a keyless request/],
    ["a name twice", [entry("sk-x1", "team"), entry("sk-x2", "team")], /the name team is given to two keys/],
    ["a key twice, under two names", [entry("sk-x1", "ops"), entry("sk-x1", "ci")], /the key named ci is the same key as ops/],
    ["an explicit name that is another key's digest name", [entry("sk-x1", unnamed("sk-x2")), entry("sk-x2", unnamed("sk-x2"))], /is given to two keys/],
  ])("refuses %s, naming the name and never the key", (_name, entries, message) => {
    expect(() => checkKeyEntries(entries)).toThrow(KeyFileError);
    expect(() => checkKeyEntries(entries)).toThrow(message);
    try {
      checkKeyEntries(entries);
    } catch (error) {
      expect((error as Error).message).not.toMatch(/sk-x/);
    }
  });

  it("names that only look like the reserved ones are fine", () => {
    const entries = [entry("k1", "Local"), entry("k2", "local-ci"), entry("k3", "anonymous2"), entry("k4", "constructor"), entry("k5", "__proto__")];
    expect(checkKeyEntries(entries)).toEqual(entries);
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

  it("a key sent on the trusted socket is that key, an admin there (its peer could send none)", () => {
    const onSocket = new Request("http://x/", { headers: { "x-trusted": "1", authorization: "Bearer k-bob" } });
    expect(keyring.identify(onSocket)).toEqual({ name: "bob", admin: true, limits: { ...NONE, tokensPerMinute: 100 } });
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
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

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

  it("a key in API_KEYS and again in API_KEYS_FILE, or a reserved name there, stops the start", () => {
    writeFileSync(join(dir, "again"), "k-env name=named-twice\n");
    expect(() => loadConfig({ API_KEYS: "k-env", API_KEYS_FILE: join(dir, "again") }, [])).toThrow(/API_KEYS and API_KEYS_FILE: the key named named-twice is the same key as key-/);
    writeFileSync(join(dir, "reserved"), "k-file name=local admin\n");
    expect(() => loadConfig({ API_KEYS_FILE: join(dir, "reserved") }, [])).toThrow(/the name local is reserved/);
  });

  it("usage is kept beside the settings unless USAGE_PATH says where", () => {
    expect(loadConfig({ INFERENCE_SETTINGS_PATH: "/data/settings.json" }, []).inference.usagePath).toBe("/data/usage.json");
    expect(loadConfig({ USAGE_PATH: "/elsewhere/u.json" }, []).inference.usagePath).toBe("/elsewhere/u.json");
  });
});

describe("a real start", () => {
  it("with a key named local in API_KEYS_FILE exits at once, the name on stderr and the key nowhere", () => {
    const dir = mkdtempSync(join(tmpdir(), "llamadock-keys-start-"));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, "keys"), "sk-real-start-5b1e name=alice\nsk-real-start-9d0c name=local admin\n");
    const run = spawnSync(runtimeBinary("node"), commandLine({ runtime: "node" }), {
      cwd: projectRoot,
      env: { ...process.env, SERVICES: "runner", RUNNER_PORT: "0", RUNNER_SOCKET: "none", MODELS_PATH: join(dir, "models"), API_KEYS_FILE: join(dir, "keys") },
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(run.status, run.stderr).not.toBe(0);
    expect(run.signal).toBeNull();
    expect(run.stderr).toContain(`API_KEYS_FILE ${join(dir, "keys")}: the name local is reserved`);
    expect(run.stdout + run.stderr).not.toContain("sk-real-start");
    expect(run.stdout).not.toContain("listening");
  }, 70_000);
});

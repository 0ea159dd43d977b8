import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { bareName, idPrefix, parseReference } from "../../src/models/reference.ts";

const HEX = "a".repeat(64);

describe("parseReference", () => {
  it.each([
    ["smollm2", "docker.io", "ai/smollm2", "latest", "ai/smollm2:latest"],
    ["  ai/smollm2  ", "docker.io", "ai/smollm2", "latest", "ai/smollm2:latest"],
    ["ai/smollm2:", "docker.io", "ai/smollm2", "latest", "ai/smollm2:latest"],
    ["ai/SmolLM2:Q4_K_M", "docker.io", "ai/smollm2", "Q4_K_M", "ai/smollm2:Q4_K_M"],
    ["docker.io/ai/smollm2:latest", "docker.io", "ai/smollm2", "latest", "ai/smollm2:latest"],
    ["index.docker.io/ai/smollm2", "docker.io", "ai/smollm2", "latest", "ai/smollm2:latest"],
    ["myorg/model:v1", "docker.io", "myorg/model", "v1", "myorg/model:v1"],
    ["localhost:5000/ai/tiny:v2", "localhost:5000", "ai/tiny", "v2", "localhost:5000/ai/tiny:v2"],
    ["localhost/tiny", "localhost", "tiny", "latest", "localhost/tiny:latest"],
    ["registry.example.com:443/a/b/c", "registry.example.com:443", "a/b/c", "latest", "registry.example.com:443/a/b/c:latest"],
    ["hf.co/Org/Repo-GGUF:Q8_0", "huggingface.co", "org/repo-gguf", "Q8_0", "huggingface.co/org/repo-gguf:Q8_0"],
    ["huggingface.co/org/repo", "huggingface.co", "org/repo", "latest", "huggingface.co/org/repo:latest"],
    [`ai/tiny@sha256:${HEX}`, "docker.io", "ai/tiny", "latest", `ai/tiny@sha256:${HEX}`],
  ])("%j -> %s %s %s", (input, registry, repository, tag, key) => {
    const reference = parseReference(input);
    expect(reference).toMatchObject({ registry, repository, tag, key });
  });

  it("keeps the Hub path's case for its URLs", () => {
    expect(parseReference("hf.co/Org/Repo-GGUF").remotePath).toBe("Org/Repo-GGUF");
  });

  it("leaves out the configured default registry from keys, and adds it to bare names", () => {
    const options = { defaultRegistry: "localhost:5000" };
    expect(parseReference("ai/tiny", options)).toMatchObject({ registry: "localhost:5000", key: "ai/tiny:latest" });
    expect(parseReference("localhost:5000/ai/tiny", options).key).toBe("ai/tiny:latest");
    expect(parseReference("docker.io/ai/tiny", options).key).toBe("docker.io/ai/tiny:latest");
  });

  it.each([
    "",
    "   ",
    "../etc/passwd",
    "ai/../../x",
    "/abs/path",
    "ai/x\u0000y",
    "ai/x\ny",
    "ai\\x",
    "ai/x y",
    "ai//x",
    "ai/x:bad:tag:",
    "ai/x:-tag",
    `ai/x@sha256:${"g".repeat(64)}`,
    "ai/x@md5:abc",
    "ai/-x",
    "a".repeat(600),
  ])("rejects %j with a 400", (input) => {
    let error: unknown;
    try {
      parseReference(input);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(HttpError);
    expect((error as HttpError).status).toBe(400);
  });
});

describe("idPrefix", () => {
  it.each([
    [`sha256:${HEX}`, `sha256:${HEX}`],
    [HEX, `sha256:${HEX}`],
    ["abcdef012345", "sha256:abcdef012345"],
    ["abcdef01234", undefined],
    ["smollm2", undefined],
    ["ai/abcdef012345", undefined],
  ])("%j -> %j", (input, expected) => {
    expect(idPrefix(input)).toBe(expected);
  });
});

describe("bareName", () => {
  it.each([
    ["myorg/smollm2:v1", "smollm2"],
    ["localhost:5000/ai/tiny:latest", "tiny"],
    [`ai/tiny@sha256:${HEX}`, "tiny"],
  ])("%j -> %j", (key, expected) => {
    expect(bareName(key)).toBe(expected);
  });
});

// Found by the fuzz tests (test/fuzz/reference.fuzz.test.ts).
describe("parseReference, fuzz findings", () => {
  it("refuses a non-ASCII letter that lower-cases into ASCII (the Kelvin sign is not k)", () => {
    for (const input of ["\u212A", "hf.co/\u212Aorg/repo", "\u212A.com/x", "ai/caf\u00e9"]) {
      expect(() => parseReference(input)).toThrow(HttpError);
    }
  });

  it("keeps the default registry in the key when the name's first part reads as a registry", () => {
    expect(parseReference("docker.io/a.b/c").key).toBe("docker.io/a.b/c:latest");
    expect(parseReference("a.b/c").key).toBe("a.b/c:latest");
    expect(parseReference("docker.io/a.b/c").key).not.toBe(parseReference("a.b/c").key);
    expect(parseReference(parseReference("docker.io/localhost/x").key)).toMatchObject({ registry: "docker.io", repository: "localhost/x" });
  });

  it("refuses a name whose key would be too long to parse back", () => {
    expect(() => parseReference(`hf.co/org/${"b".repeat(495)}`)).toThrow(/too long/);
  });
});

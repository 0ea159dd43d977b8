import { describe, expect, it } from "vitest";
import { parseChallenge } from "../../src/models/registry/auth.ts";
import { registryBaseUrl } from "../../src/models/registry/client.ts";

describe("registryBaseUrl", () => {
  it.each([
    ["docker.io", [], "https://registry-1.docker.io"],
    ["localhost:5000", [], "http://localhost:5000"],
    ["127.0.0.1:5000", [], "http://127.0.0.1:5000"],
    ["[::1]:5000", [], "http://[::1]:5000"],
    ["models.local", [], "http://models.local"],
    ["reg.lan:5000", ["reg.lan:5000"], "http://reg.lan:5000"],
    ["reg.lan:5000", ["reg.lan"], "https://reg.lan:5000"],
    ["ghcr.io", [], "https://ghcr.io"],
  ])("%s (insecure %j) -> %s", (host, insecure, expected) => {
    expect(registryBaseUrl(host, insecure)).toBe(expected);
  });
});

describe("parseChallenge", () => {
  it("reads Docker Hub's bearer challenge", () => {
    expect(
      parseChallenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:ai/smollm2:pull"'),
    ).toEqual({
      scheme: "bearer",
      params: { realm: "https://auth.docker.io/token", service: "registry.docker.io", scope: "repository:ai/smollm2:pull" },
    });
  });

  it("reads a basic challenge and unquoted values", () => {
    expect(parseChallenge('Basic realm="Registry Realm"')).toEqual({ scheme: "basic", params: { realm: "Registry Realm" } });
    expect(parseChallenge("Bearer realm=http://h/t, service=s")).toEqual({ scheme: "bearer", params: { realm: "http://h/t", service: "s" } });
  });
});

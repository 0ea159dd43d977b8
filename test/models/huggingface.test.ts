import { randomBytes } from "node:crypto";
import { stat } from "node:fs/promises";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { pickWeights } from "../../src/models/huggingface/plan.ts";
import { startFakeHub, type FakeHub } from "../support/fake-hub.ts";
import { sha256 } from "../support/registry.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { call, modelApi, pull, type ModelApi } from "./helpers.ts";

// Pulls of `hf.co/<org>/<repo>[:<quant>]` from a loopback fake of the Hugging Face Hub.

const q4 = tinyLlamaGguf({ seed: 4 });
const q8 = tinyLlamaGguf({ seed: 8 });
const projector = tinyLlamaGguf({ seed: 5 });
let hub: FakeHub;
let api: ModelApi;

beforeAll(async () => {
  hub = await startFakeHub(
    {
      "TestOrg/Tiny-GGUF": {
        "README.md": new TextEncoder().encode("# tiny"),
        "tiny-Q4_K_M.gguf": q4,
        "tiny-Q8_0.gguf": q8,
        "mmproj-tiny-F16.gguf": projector,
      },
    },
    { token: "hf_test_token" },
  );
});
afterAll(async () => {
  await hub?.stop();
});
afterEach(async () => {
  await api?.dispose();
});

describe("Hugging Face pulls", () => {
  it("picks Q4_K_M by default, downloads it with the mmproj, and stores it under huggingface.co/…", async () => {
    api = await modelApi({ hfEndpoint: hub.url, hfToken: "hf_test_token" });
    const { lines } = await pull(api.handler, { from: "hf.co/TestOrg/Tiny-GGUF" });
    expect(lines.at(-1)).toMatchObject({ type: "success", message: "Model pulled successfully" });
    const model = (await call(api.handler, "GET", "/models/hf.co/testorg/tiny-gguf")).json;
    expect(model.tags).toEqual(["huggingface.co/testorg/tiny-gguf:latest"]);
    expect(model.config).toMatchObject({ format: "gguf", quantization: "Q4_K_M", architecture: "llama" });
    const stored = await api.store.resolve("huggingface.co/testorg/tiny-gguf");
    expect(stored!.ggufPath.endsWith(sha256(q4).slice(7))).toBe(true);
    expect((await stat(stored!.mmprojPath!)).size).toBe(projector.byteLength);
    expect(hub.requests).toContain("GET /api/models/TestOrg/Tiny-GGUF/tree/main");

    const again = await pull(api.handler, { from: "hf.co/TestOrg/Tiny-GGUF" });
    expect(again.lines.at(-1)?.message).toBe("Using cached model: huggingface.co/testorg/tiny-gguf:latest");
  });

  it("picks the quantisation of the tag", async () => {
    api = await modelApi({ hfEndpoint: hub.url, hfToken: "hf_test_token" });
    await pull(api.handler, { from: "hf.co/TestOrg/Tiny-GGUF:q8_0" });
    const stored = await api.store.resolve("hf.co/testorg/tiny-gguf:q8_0");
    expect(stored!.ggufPath.endsWith(sha256(q8).slice(7))).toBe(true);
  });

  it("answers 404 listing the available quantisations, 404 for an unknown repo, 401 without the token", async () => {
    api = await modelApi({ hfEndpoint: hub.url, hfToken: "hf_test_token" });
    const missing = await pull(api.handler, { from: "hf.co/TestOrg/Tiny-GGUF:Q2_K" });
    expect(missing.status).toBe(404);
    expect(missing.json.error.message).toContain("available: Q4_K_M, Q8_0");
    expect((await pull(api.handler, { from: "hf.co/nobody/nothing" })).status).toBe(404);
    await api.dispose();
    api = await modelApi({ hfEndpoint: hub.url });
    expect((await pull(api.handler, { from: "hf.co/TestOrg/Tiny-GGUF" })).status).toBe(401);
  });
});

describe("a large Hub file", () => {
  it("comes in ranged parts from the CDN the Hub redirects to, without the token", async () => {
    const head = tinyLlamaGguf({ seed: 6 });
    const big = new Uint8Array(6 << 20);
    big.set(head);
    big.set(randomBytes(big.byteLength - head.byteLength), head.byteLength);
    const cdnHub = await startFakeHub({ "TestOrg/Big-GGUF": { "big-Q4_K_M.gguf": big } }, { token: "hf_test_token", cdn: true });
    try {
      api = await modelApi({ hfEndpoint: cdnHub.url, hfToken: "hf_test_token", pullParts: { streams: 4, minBytes: 256 << 10 } });
      expect((await pull(api.handler, { from: "hf.co/TestOrg/Big-GGUF" })).lines.at(-1)).toMatchObject({ type: "success" });
      const gets = cdnHub.requests.filter((r) => r.includes("big-Q4_K_M.gguf"));
      // The first part through the Hub (with the token), redirected; the 15 others to the CDN straight.
      expect(gets.filter((r) => r.startsWith("GET /TestOrg/"))).toEqual([expect.stringMatching(/ bytes=0-\d+$/)]);
      expect(gets.filter((r) => r.startsWith("GET /cdn/"))).toHaveLength(16);
      expect(cdnHub.withToken.filter((r) => r.includes("big-Q4_K_M.gguf"))).toEqual(gets.filter((r) => r.startsWith("GET /TestOrg/")));
      const stored = await api.store.resolve("hf.co/testorg/big-gguf");
      expect(stored!.ggufPath.endsWith(sha256(big).slice(7))).toBe(true);
    } finally {
      await cdnHub.stop();
    }
  });
});

describe("pickWeights", () => {
  const file = (path: string) => ({ path, size: 1, digest: `sha256:${"0".repeat(64)}` });
  it.each([
    [["a-Q4_K_M.gguf", "a-Q8_0.gguf"], "latest", "a-Q4_K_M.gguf"],
    [["a-Q4_K_M.gguf", "a-Q8_0.gguf"], "Q8_0", "a-Q8_0.gguf"],
    [["only.gguf"], "latest", "only.gguf"],
    [["mmproj-Q4_K_M.gguf", "w-Q4_K_M.gguf"], "latest", "w-Q4_K_M.gguf"],
    [["sub/dir/w.Q5_K_M.gguf"], "Q5_K_M", "sub/dir/w.Q5_K_M.gguf"],
  ])("%j with %s -> %s", (paths, tag, expected) => {
    expect(pickWeights(paths.map(file), tag, "o/r").map((f) => f.path)).toEqual([expected]);
  });

  it("picks every shard of a split quantisation, in order, and no other file", () => {
    const paths = ["Q8_0/w-Q8_0-00001-of-00002.gguf", "Q4_K_M/w-Q4_K_M-00003-of-00003.gguf", "Q4_K_M/w-Q4_K_M-00001-of-00003.gguf", "Q4_K_M/w-Q4_K_M-00002-of-00003.gguf"];
    expect(pickWeights(paths.map(file), "latest", "o/r").map((f) => f.path)).toEqual(["Q4_K_M/w-Q4_K_M-00001-of-00003.gguf", "Q4_K_M/w-Q4_K_M-00002-of-00003.gguf", "Q4_K_M/w-Q4_K_M-00003-of-00003.gguf"]);
    // A whole file of the quantisation, where there is one beside shards, is the one.
    expect(pickWeights([...paths, "w-Q4_K_M.gguf"].map(file), "latest", "o/r").map((f) => f.path)).toEqual(["w-Q4_K_M.gguf"]);
  });

  it("answers 404 naming the shard a repository lacks", () => {
    const paths = ["w-Q4_K_M-00001-of-00003.gguf", "w-Q4_K_M-00003-of-00003.gguf"];
    expect(() => pickWeights(paths.map(file), "latest", "o/r")).toThrow("o/r lacks shard 2 of 3 of w-Q4_K_M (w-Q4_K_M-00002-of-00003.gguf)");
  });
});

import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gguf } from "@huggingface/gguf";
import { afterAll, describe, expect, it } from "vitest";
import { tinyLlamaGguf, writeTinyLlamaGguf } from "../support/tiny-gguf.ts";

describe("tiny GGUF writer", () => {
  const dirs: string[] = [];
  afterAll(async () => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

  it("writes the same bytes for the same seed, other bytes for another seed", () => {
    const a = tinyLlamaGguf();
    expect(Buffer.compare(a, tinyLlamaGguf())).toBe(0);
    expect(Buffer.compare(a, tinyLlamaGguf({ seed: 7 }))).not.toBe(0);
    expect(new TextDecoder().decode(a.subarray(0, 4))).toBe("GGUF");
  });

  it("parses as a GGUF v3 llama model with its 259-token vocabulary", async () => {
    const dir = await mkdtemp(join(tmpdir(), "llamadock-tiny-gguf-"));
    dirs.push(dir);
    const path = join(dir, "tiny.gguf");
    await writeTinyLlamaGguf(path);
    const parsed = await gguf(path, { allowLocalFile: true });
    const { tensorInfos } = parsed;
    const metadata = parsed.metadata as Record<string, unknown>;
    expect(metadata.version).toBe(3);
    expect(metadata["general.architecture"]).toBe("llama");
    expect(metadata["llama.context_length"]).toBe(512);
    expect(metadata["llama.block_count"]).toBe(2);
    expect((metadata["tokenizer.ggml.tokens"] as string[]).length).toBe(259);
    expect(tensorInfos.map((t) => t.name)).toContain("blk.1.ffn_down.weight");
    expect(tensorInfos).toHaveLength(3 + 2 * 9);
  });
});

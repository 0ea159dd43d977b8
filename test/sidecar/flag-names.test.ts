import { execFileSync } from "node:child_process";
import { env } from "node:process";
import { describe, expect, it } from "vitest";
import { launchEnv } from "../../sidecar/binary.ts";
import { parseHelpFlags, spellFor, spellingsOf } from "../../sidecar/flag-names.ts";
import { resolveLlamaServerBinary } from "../../sidecar/index.ts";
import { detectRuntime } from "../../src/runtime/index.ts";

// Flag names across llama.cpp releases: what a build's --help lists, and an argv spelled in it.

const OLD_HELP = [
  "-cpent, --checkpoint-every-n-tokens N   create a checkpoint every n tokens (default: 8192)",
  "-dio,  --direct-io                       use direct I/O",
  "--draft-max, --draft, --draft-n N       number of tokens to draft (default: 16)",
  "                                        (env: LLAMA_ARG_DRAFT_MAX)",
  "-t,    --threads N                       number of threads",
].join("\n");

describe("flag names per build", () => {
  it("reads the flags a --help lists, leaving out descriptions and the flags it says were removed", async () => {
    expect(parseHelpFlags(OLD_HELP).sort()).toEqual(["--checkpoint-every-n-tokens", "--direct-io", "--draft", "--draft-max", "--draft-n", "--threads", "-cpent", "-dio", "-t"]);
    expect(parseHelpFlags("--draft, --draft-n, --draft-max N       the argument has been removed. use --spec-draft-n-max")).toEqual([]);
  });

  it("finds in the setup's build every flag the argv builder writes, and not the removed --draft-max", async () => {
    const binary = await resolveLlamaServerBinary({ runtime: await detectRuntime(), env });
    const help = execFileSync(binary.path, ["--help"], { env: launchEnv(binary.path, env), encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    const flags = new Set(parseHelpFlags(help));
    for (const flag of ["--model", "--alias", "--host", "--port", "--metrics", "--jinja", "--no-webui", "--ctx-size", "--parallel", "--n-gpu-layers", "--embeddings", "--pooling", "--rerank", "--threads", "--threads-http", "--cache-ram", "--ctx-checkpoints", "--slot-save-path", "--spec-draft-n-max", "-cms", "--load-mode"]) {
      expect(flags.has(flag), flag).toBe(true);
    }
    expect(flags.has("--draft-max")).toBe(false);
  });

  it("spells renamed flags the way the build takes them, both ways, with the value a spelling implies", () => {
    const old = new Set(parseHelpFlags(OLD_HELP));
    expect(spellFor(["--spec-draft-n-max", "8", "-cms", "64", "--load-mode", "dio", "-t", "2"], old)).toEqual({ args: ["--draft-max", "8", "-cpent", "64", "-dio", "-t", "2"] });
    const recent = new Set(["--spec-draft-n-max", "-cms", "--load-mode", "-lm"]);
    expect(spellFor(["--draft-max", "8", "-cpent=64", "-dio"], recent)).toEqual({ args: ["--spec-draft-n-max", "8", "-cms=64", "--load-mode", "dio"] });
  });

  it("names the first flag a build has under no name", () => {
    expect(spellFor(["-t", "2", "--swa-full", "--load-mode", "mmap"], new Set(["-t"]))).toEqual({ missing: "--swa-full" });
    // --load-mode with another value has no older spelling.
    expect(spellFor(["--load-mode", "mmap"], new Set(["-dio"]))).toEqual({ missing: "--load-mode" });
    expect(spellingsOf("-cms")).toEqual(["-cms", "--checkpoint-min-step", "-cpent", "--checkpoint-every-n-tokens"]);
    expect(spellingsOf("--seed")).toEqual(["--seed"]);
  });
});

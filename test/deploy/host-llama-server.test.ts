import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LLAMA_CPP_RELEASE, resolveLlamaServerBinary } from "../../sidecar/index.ts";
import { detectRuntime } from "../../src/runtime/index.ts";
import { BASE_IMAGE, buildImage, exec, inCi, podmanUsable, type Result } from "../support/podman.ts";

// scripts/host-llama-server.sh, which lets the image take this host's llama-server build instead of
// compiling llama.cpp a second time: given caches made here from the build the tests run (copied,
// some with a version need raised in place), it takes a CPU build whose C and C++ runtime needs the
// base image meets, and refuses, naming why, a missing build, a CUDA one, and one that needs a
// newer glibc or libstdc++ than the image's.

const usable = podmanUsable();
if (!usable && !inCi) console.warn("podman cannot run here: the host build's check for the image is NOT run (scripts/setup.sh --test installs podman; in CI this fails)");

const BUILD_TIMEOUT_MS = 60 * 60_000;

describe.skipIf(!usable && !inCi)("scripts/host-llama-server.sh, the host build the image may take", () => {
  let dir: string;
  let build: string;

  /** A cache as sidecar/build-llama-server.sh leaves it, holding a copy of the tests' build. */
  async function cache(name: string, flavour = "cpu"): Promise<{ root: string; bin: string }> {
    const root = join(dir, name);
    const bin = join(root, `llama.cpp-${LLAMA_CPP_RELEASE}`, "bin");
    await cp(build, bin, { recursive: true, verbatimSymlinks: true });
    await writeFile(join(bin, "..", "FLAVOUR"), `${flavour}\n`);
    return { root, bin };
  }

  /** Raises, in place, the first version need `pattern` finds in `file` to `raised` (as long). */
  async function raiseNeed(file: string, pattern: RegExp, raised: string): Promise<void> {
    const bytes = await readFile(file);
    const text = bytes.toString("latin1");
    const found = pattern.exec(text);
    if (!found || found[0].length !== raised.length) throw new Error(`no ${pattern} of ${raised.length} characters in ${file}`);
    bytes.write(raised, found.index, "latin1");
    await writeFile(file, bytes);
  }

  const check = (root: string): Promise<Result> =>
    exec("bash", ["scripts/host-llama-server.sh", BASE_IMAGE], { env: { ...process.env, LLAMADOCK_CACHE: root }, allowFailure: true });

  beforeAll(async () => {
    const podman = await exec("podman", ["image", "exists", BASE_IMAGE], { allowFailure: true });
    if (podman.code !== 0) await buildImage(BUILD_TIMEOUT_MS);
    build = dirname((await resolveLlamaServerBinary({ runtime: await detectRuntime(), env: process.env })).path);
    dir = await mkdtemp(join(tmpdir(), "llamadock-host-build-"));
  }, BUILD_TIMEOUT_MS + 60_000);

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("takes a CPU build whose runtime needs the base image meets, and prints its folder", async () => {
    const { root, bin } = await cache("cpu");
    const taken = await check(root);
    expect(taken.code, taken.stderr).toBe(0);
    expect(taken.stdout.trim()).toBe(bin);
  });

  it("refuses when there is no build, and when the build is a CUDA one", async () => {
    const none = await check(join(dir, "empty"));
    expect(none.code).not.toBe(0);
    expect(none.stderr).toContain("no llama-server build on this host: llama-server is compiled in the image");
    const cuda = await check((await cache("cuda", "cuda")).root);
    expect(cuda.code).not.toBe(0);
    expect(cuda.stderr).toContain("this host's llama-server is a cuda build");
    expect(cuda.stdout).toBe("");
  });

  it("refuses a build that needs a newer glibc than the base image's, naming both", async () => {
    const { root, bin } = await cache("glibc");
    await raiseNeed(join(bin, "llama-server"), /GLIBC_2\.\d\d(?=\0)/, "GLIBC_2.99");
    const refused = await check(root);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(new RegExp(`needs GLIBC_2\\.99 and ${BASE_IMAGE} has GLIBC_2\\.\\d+: llama-server is compiled in the image`));
  });

  it("refuses a build that needs a newer libstdc++ than the base image's", async () => {
    const { root, bin } = await cache("glibcxx");
    await raiseNeed(join(bin, "llama-server"), /GLIBCXX_3\.4\.\d\d(?=\0)/, "GLIBCXX_3.4.99");
    const refused = await check(root);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(new RegExp(`needs GLIBCXX_3\\.4\\.99 and ${BASE_IMAGE} has GLIBCXX_3\\.4\\.\\d+`));
  });
});

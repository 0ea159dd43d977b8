import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { layerTar, publishBuild, pushImage, type LayerEntry } from "../support/engine-builds.ts";

// Engine images that aim outside the engine store, pushed to a real registry and pulled by the
// server over HTTP (`POST /engines/builds`): each is refused with a 400 before anything of it runs,
// nothing appears in (or goes from) the folders they aim at, nothing of the pull is left in the
// store, and the server goes on pulling a sound image. The sound one is laid out as the official
// images are, over a base system whose links are absolute or go through other links.

describe("engine images that aim outside the store", () => {
  let stack: Stack;
  // Aimed at: a folder beside the store (four levels up from a pull's image folder:
  // <dir>/models/engines/.incoming-<uuid>/image), and one in the system temp folder.
  let beside: string;
  let temp: string;
  const UP = "../../../..";
  const refs: Record<string, string> = {};

  beforeAll(async () => {
    stack = await startStack({ models: [] });
    beside = join(stack.dir, "outside");
    temp = await mkdtemp(join(tmpdir(), "llamadock-aimed-at-"));
    for (const folder of [beside, temp]) {
      await mkdir(folder, { recursive: true });
      await writeFile(join(folder, "sentinel"), "keep me");
    }
    const image = join(stack.dir, "models", "engines", ".incoming-x", "image");
    // From the image folder, as many `..` as it has parts reach the root; then down to the temp folder.
    const toTemp = `${"../".repeat(image.split("/").length - 1)}${temp.slice(1)}`;
    const hostile: Record<string, LayerEntry[][]> = {
      // The first reproduction: a name of `./` parts, one more than its target's `..`.
      dotted: [[{ name: `${"./".repeat(toTemp.split("/").length + 1)}a`, link: toTemp }, { name: "a/pwned", data: "x" }]],
      // Two links that each look inside, one through the other: the next layer writes, then deletes, through it.
      chained: [[{ name: "a/b/c/e/s1", link: UP }, { name: "s2", link: `a/b/c/e/s1/${UP}` }], [{ name: "s2/outside/pwned", data: "x" }]],
      whiteout: [[{ name: "a/b/c/e/s1", link: UP }, { name: "s2", link: `a/b/c/e/s1/${UP}` }], [{ name: "s2/outside/.wh.sentinel", data: "" }]],
      // A link an earlier layer made, led out by a later layer's link.
      later: [[{ name: "y/", dir: true }, { name: "x", link: "y/.." }], [{ name: "y", link: "." }], [{ name: "app/llama-server", data: "#!/bin/sh\n", mode: 0o755 }]],
    };
    for (const [tag, layers] of Object.entries(hostile)) refs[tag] = await pushImage(stack.registry, "llamadock/hostile", tag, layers.map(layerTar));
    // A sound image: a base system's links under the real build's layer.
    const build = await publishBuild(stack.registry, "as-built", "plain");
    const base = layerTar([
      { name: "usr/bin/", dir: true },
      { name: "usr/bin/mawk", data: "awk", mode: 0o755 },
      { name: "bin", link: "usr/bin" },
      { name: "etc/alternatives/awk", link: "/usr/bin/mawk" },
      { name: "usr/bin/awk", link: "/etc/alternatives/awk" },
      { name: "var/run", link: "/run" },
      { name: "usr/bin/perl5", data: "perl", mode: 0o755 },
      { name: "usr/bin/perl", hard: "usr/bin/perl5" },
    ]);
    refs.based = await pushImage(stack.registry, "llamadock/llama-server", "based", [base, { ...build.layer, mediaType: "application/vnd.oci.image.layer.v1.tar+gzip" }]);
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
    if (temp) await rm(temp, { recursive: true, force: true });
  });

  const untouched = async () => {
    for (const folder of [beside, temp]) {
      expect(await readdir(folder)).toEqual(["sentinel"]);
      expect(await readFile(join(folder, "sentinel"), "utf8")).toBe("keep me");
    }
    // Nothing of a refused pull stays in the store, nor beside the image folder.
    expect((await readdir(join(stack.dir, "models", "engines"))).filter((n) => n.startsWith(".incoming"))).toEqual([]);
    expect((await readdir(stack.dir)).sort()).not.toContain("pwned");
  };

  it.each([
    ["dotted", /the engine image is refused: the entry ".*" is not written plainly/],
    ["chained", /the engine image is refused: the symbolic link "s2" leads out of the image/],
    ["whiteout", /the engine image is refused: the symbolic link "s2" leads out of the image/],
    ["later", /the engine image is refused: the symbolic link "x" leads out of the image or loops \(to "y\/\.\."\) through the links of later layers/],
  ])("refuses the %s image with a 400, and nothing appears or goes outside", async (tag, why) => {
    const pulled = await ask({ url: stack.url }, "POST", "/engines/builds", { reference: refs[tag]! });
    expect(pulled.status, pulled.body).toBe(400);
    expect(pulled.json().error).toMatchObject({ type: "invalid_request_error", code: "unsafe_engine", message: expect.stringMatching(why) });
    await untouched();
  });

  it("pulls an image laid over a base system (absolute links, links through links, a hard link), and runs it for its version", async () => {
    const pulled = await ask({ url: stack.url }, "POST", "/engines/builds", { reference: refs.based! });
    expect(pulled.status, pulled.body).toBe(201);
    expect(pulled.json()).toMatchObject({ name: "based", layout: "llama.cpp", version: expect.stringMatching(/\S/) });
    await untouched();
  });
});

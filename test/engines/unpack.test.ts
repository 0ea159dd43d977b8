import { lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { checkLinks, imageTree, markExecutable, unpackLayer, type ImageTree } from "../../src/engines/unpack.ts";
import { layerTar, type LayerEntry as Entry } from "../support/engine-builds.ts";

// An engine image's layers unpacked on a real disk, each entry placed by its real path. The image
// folder sits four levels under a folder `outside` is in (as a pull's folder sits in the store), so
// that the hostile layers below can aim at it: a refused image leaves `outside` as it was, and
// nothing written anywhere else either.

/** Everything under `dir`, as paths (links not followed). */
async function listing(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) out.push(join(entry.parentPath, entry.name).slice(dir.length + 1));
  return out.sort();
}

describe("unpacking an engine image's layers", () => {
  let dir: string;
  let image: ImageTree;
  // The image's folder, four levels down from `dir` (store/engines/.incoming/image): "../../../.." from it is `dir`.
  const UP = "../../../..";
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-unpack-"));
    await mkdir(join(dir, "outside"));
    await mkdir(join(dir, "layers"));
    await writeFile(join(dir, "outside", "sentinel"), "keep me");
    await mkdir(join(dir, "store", "engines", ".incoming"), { recursive: true });
    image = imageTree(join(dir, "store", "engines", ".incoming", "image"));
  });
  afterEach(async () => void (await rm(dir, { recursive: true, force: true })));

  let layers = 0;
  const unpack = async (...each: Entry[][]) => {
    for (const entries of each) {
      const file = join(dir, "layers", `layer-${layers++}.tar`);
      await writeFile(file, layerTar(entries));
      await unpackLayer(file, false, image).finally(() => rm(file));
    }
    checkLinks(image);
  };
  const outsideUntouched = async () => {
    expect(await listing(join(dir, "outside"))).toEqual(["sentinel"]);
    expect(await readFile(join(dir, "outside", "sentinel"), "utf8")).toBe("keep me");
    expect((await readdir(dir)).sort()).toEqual(["layers", "outside", "store"]);
    expect(await readdir(join(dir, "layers"))).toEqual([]);
    expect(await readdir(join(dir, "store", "engines", ".incoming"))).toEqual(["image"]);
  };

  it("keeps links inside, and gives execute bits back only in the folders named", async () => {
    await unpack([
      { name: "app/llama-server", data: "#!/bin/sh\n", mode: 0o755 },
      { name: "app/libggml.so.0", data: "lib", mode: 0o755 },
      { name: "app/libggml.so", link: "libggml.so.0" },
      { name: "etc/tool", data: "#!/bin/sh\n", mode: 0o755 },
    ]);
    await markExecutable(image, ["app"]);
    expect(await readlink(join(image.root, "app/libggml.so"))).toBe("libggml.so.0");
    expect((await lstat(join(image.root, "app/llama-server"))).mode & 0o777).toBe(0o755);
    expect((await lstat(join(image.root, "etc/tool"))).mode & 0o111).toBe(0);
  });

  it("takes a base system's links: absolute ones written from the image's root, a hard link to a file of the image", async () => {
    await unpack(
      [
        { name: "usr/bin/", dir: true },
        { name: "usr/bin/mawk", data: "awk", mode: 0o755 },
        { name: "bin", link: "usr/bin" },
        { name: "etc/alternatives/awk", link: "/usr/bin/mawk" },
        { name: "usr/bin/awk", link: "/etc/alternatives/awk" },
        { name: "usr/bin/perl5", data: "perl", mode: 0o755 },
        { name: "usr/bin/perl", hard: "usr/bin/perl5" },
      ],
      [{ name: "app/llama-server", data: "x", mode: 0o755 }],
    );
    expect(await readlink(join(image.root, "usr/bin/awk"))).toBe("../../etc/alternatives/awk");
    expect(await readFile(join(image.root, "usr/bin/awk"), "utf8")).toBe("awk");
    expect((await stat(join(image.root, "usr/bin/perl"))).ino).toBe((await stat(join(image.root, "usr/bin/perl5"))).ino);
    await outsideUntouched();
  });

  it("a later layer replaces, removes (whiteouts) and empties (opaque) what earlier ones put, links as links", async () => {
    await unpack(
      [
        { name: "app/a", data: "a" },
        { name: "app/b", data: "b" },
        { name: "keep/x", data: "x" },
        { name: "lib", link: "keep" },
        { name: "gone/y", data: "y" },
      ],
      [
        { name: "app/.wh..wh..opq", data: "" },
        { name: "app/c", data: "c" },
        { name: ".wh.gone", data: "" },
        { name: "lib", data: "now a file" },
      ],
    );
    expect(await listing(image.root)).toEqual(["app", "app/c", "keep", "keep/x", "lib"]);
    expect(await readFile(join(image.root, "lib"), "utf8")).toBe("now a file");
    expect(await readFile(join(image.root, "keep/x"), "utf8")).toBe("x");
  });

  // The reproductions, and their kin: each refused, nothing written or removed anywhere.
  const hostile: [string, Entry[][], RegExp][] = [
    ["a dotted name for a link that climbs out (./././…/a), then a file under it", [[{ name: "./././././a", link: `${UP}/outside` }, { name: "a/pwned", data: "x" }]], /not written plainly/],
    ["a link to the folder's parent through a link to its root (d/s1 -> .., s2 -> d/s1/..)", [[{ name: "d/s1", link: ".." }, { name: "s2", link: "d/s1/.." }], [{ name: "s2/pwned", data: "x" }]], /the symbolic link "s2" leads out/],
    ["the same, four levels up, then a file in the next layer", [[{ name: "a/b/c/e/s1", link: UP }, { name: "s2", link: `a/b/c/e/s1/${UP}` }], [{ name: "s2/outside/pwned", data: "x" }]], /the symbolic link "s2" leads out/],
    ["a whiteout through such a link", [[{ name: "a/b/c/e/s1", link: UP }, { name: "s2", link: `a/b/c/e/s1/${UP}` }], [{ name: "s2/outside/.wh.sentinel", data: "" }]], /the symbolic link "s2" leads out/],
    ["a file under a link that stays inside, in the next layer", [[{ name: "real/", dir: true }, { name: "in", link: "real" }], [{ name: "in/x", data: "x" }]], /the entry "in\/x" lies under a symbolic link \("in"\)/],
    ["a whiteout under a link that stays inside", [[{ name: "real/v", data: "v" }, { name: "in", link: "real" }], [{ name: "in/.wh.v", data: "" }]], /lies under a symbolic link/],
    ["an opaque marker under a link", [[{ name: "real/v", data: "v" }, { name: "in", link: "real" }], [{ name: "in/.wh..wh..opq", data: "" }]], /lies under a symbolic link/],
    ["a link that a later layer's link makes lead out (x -> y/.., then y -> .)", [[{ name: "y/", dir: true }, { name: "x", link: "y/.." }], [{ name: "y", link: "." }]], /the symbolic link "x" leads out of the image or loops \(to "y\/\.\."\) through the links of later layers/],
    ["a link that climbs out plainly", [[{ name: "app/lib.so", link: `${UP}/outside/sentinel` }]], /leads out/],
    ["a loop of links", [[{ name: "a", link: "b" }, { name: "b", link: "a" }]], /the symbolic link "b" leads out/],
    ["a hard link to a file outside", [[{ name: "app/h", hard: `${UP}/outside/sentinel` }]], /climbs out|not to a file of the image/],
    ["a hard link through a link", [[{ name: "real/f", data: "f" }, { name: "in", link: "real" }, { name: "h", hard: "in/f" }]], /the hard link "h" is not to a file of the image/],
    ["a whiteout that names the folder itself", [[{ name: "app/.wh..", data: "" }]], /names no entry/],
    ["an absolute name", [[{ name: "/outside/pwned", data: "x" }]], /absolute path/],
    ["a name that climbs", [[{ name: `app/${UP}/../outside/pwned`, data: "x" }]], /climbs out/],
    ["an empty part", [[{ name: "app//x", data: "x" }]], /not written plainly/],
    ["a file where a folder is needed", [[{ name: "f", data: "f" }, { name: "f/x", data: "x" }]], /lies under a file/],
  ];

  it.each(hostile)("refuses %s, and nothing outside is touched", async (_, each, why) => {
    await expect(unpack(...each)).rejects.toMatchObject({ status: 400, message: expect.stringMatching(why) });
    await outsideUntouched();
  });

  // Generated layers of folders, files, links (with targets of `..`, `.`, names, absolute), hard
  // links, whiteouts, names with odd parts: whatever the unpacker says, nothing appears or goes
  // outside the image, and an image it takes holds only links the kernel resolves inside.
  it("never writes or removes outside the image, whatever the layers hold", async () => {
    // Few names, so that links, the entries under them and the links through them meet often.
    const part = fc.oneof({ weight: 8, arbitrary: fc.constantFrom("a", "b") }, { weight: 1, arbitrary: fc.constantFrom(".", "..", "", ".wh.a", ".wh.b", ".wh..wh..opq", "outside") });
    const name = fc.array(part, { minLength: 1, maxLength: 3 }).map((p) => p.join("/"));
    const target = fc
      .array(fc.constantFrom("a", "b", "..", "..", "."), { minLength: 1, maxLength: 4 })
      .chain((p) => fc.constantFrom(p.join("/"), `/${p.join("/")}`, `${UP}/outside`));
    const entry = fc.oneof(
      name.map((n) => ({ name: n, data: "x" })),
      name.map((n) => ({ name: n, dir: true })),
      fc.tuple(name, target).map(([n, t]) => ({ name: n, link: t })),
      fc.tuple(name, name).map(([n, t]) => ({ name: n, hard: t })),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(entry, { maxLength: 5 }), { minLength: 1, maxLength: 3 }), async (each) => {
        await rm(join(dir, "store"), { recursive: true, force: true });
        await mkdir(join(dir, "store", "engines", ".incoming"), { recursive: true });
        image = imageTree(join(dir, "store", "engines", ".incoming", "image"));
        const taken = await unpack(...each).then(() => true, (error: { status?: number }) => {
          if (error.status !== 400) throw error;
          return false;
        });
        await outsideUntouched();
        if (!taken) return;
        for (const path of await listing(image.root)) {
          const real = await import("node:fs").then((fs) => new Promise<string | undefined>((resolve) => fs.realpath.native(join(image.root, path), (e, p) => resolve(e ? undefined : p))));
          if (real !== undefined) expect(real.startsWith(image.root)).toBe(true);
        }
      }),
      { numRuns: 400 },
    );
  });
});

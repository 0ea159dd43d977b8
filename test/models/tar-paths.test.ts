import { realpath as realpathCallback } from "node:fs";
import { mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative, sep } from "node:path";
import { promisify } from "node:util";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { entryParts, relativeTarget, resolveInside } from "../../src/models/package/tar-paths.ts";

// The path logic of tar entries and links, pure: names in their one plain spelling, and links
// followed as the kernel follows them. The resolution is checked against the kernel itself: random
// link tables made real on disk, in a folder that sits deep in a tree of real folders, so that a
// path that leaves it still lands somewhere the kernel can name.

describe("an entry's name", () => {
  it.each([
    ["app/llama-server", ["app", "llama-server"]],
    ["./app/llama-server", ["app", "llama-server"]],
    ["app/", ["app"]],
    ["./", []],
    [".", []],
    ["app/.wh..wh..opq", ["app", ".wh..wh..opq"]],
    ["a..b/c.", ["a..b", "c."]],
  ])("takes %j as %j", (name, parts) => {
    expect(entryParts(name)).toEqual({ parts });
  });

  it.each([
    ["/etc/passwd", /absolute path/],
    ["../x", /climbs out/],
    ["a/../../x", /climbs out/],
    ["./././a", /not written plainly/],
    ["a/./b", /not written plainly/],
    ["a//b", /not written plainly/],
    ["a/b//", /not written plainly/],
    [".//a", /not written plainly/],
    ["a/\0b", /NUL/],
  ])("refuses %j", (name, why) => {
    const placed = entryParts(name);
    expect("why" in placed && placed.why).toMatch(why);
  });
});

describe("a link's target, resolved", () => {
  const links = (entries: Record<string, string>) => new Map(Object.entries(entries));

  it.each<[string, Record<string, string>, string[], string, string[] | undefined]>([
    ["a plain target", {}, ["app"], "libggml.so.0", ["app", "libggml.so.0"]],
    ["up to the root", {}, ["app"], "..", []],
    ["past the root", {}, ["app"], "../..", undefined],
    ["absolute, from the root", {}, ["usr", "bin"], "/etc/alternatives/awk", ["etc", "alternatives", "awk"]],
    ["through a link to the root, then up", { "d/s1": ".." }, [], "d/s1/..", undefined],
    ["through a link, then down", { lib: "usr/lib" }, [], "lib/x", ["usr", "lib", "x"]],
    ["a link to a link", { a: "b", b: "c/d" }, [], "a/e", ["c", "d", "e"]],
    ["a loop", { a: "b", b: "a" }, [], "a", undefined],
    ["a link to itself", { a: "a" }, [], "a", undefined],
    ["the issue's dotted name, judged by its real place", {}, [], "../../tmp", undefined],
  ])("%s", (_, table, from, target, expected) => {
    expect(resolveInside(links(table), from, target)).toEqual(expected);
  });

  it.each([
    [["usr", "bin"], "/etc/alternatives/awk", "../../etc/alternatives/awk"],
    [[], "/usr/lib", "usr/lib"],
    [[], "/", "."],
    [["var"], "/run", "../run"],
    [["app"], "libggml.so.0", "libggml.so.0"],
  ])("an absolute target from %j: %j is written %j", (from, target, written) => {
    expect(relativeTarget(from, target)).toBe(written);
  });
});

// The kernel's own resolution (realpath(3)); fs.promises.realpath walks the names in JavaScript and takes `a/..` as the folder even where `a` loops.
const realpath = promisify(realpathCallback.native);

describe("resolution agrees with the kernel", () => {
  // Every path of up to DEPTH names over {a, b} is a real folder, and the folder judged (`root`,
  // a name the links never use, so that a path that leaves it cannot come back in) sits two levels
  // down with such a tree of its own: climbing out of it lands in a real folder.
  const NAMES = ["a", "b"];
  const DEPTH = 7;
  const ROOT = ["a", "b", "root"];
  let base: string;
  const makeTree = async (at: string, depth: number): Promise<void> => {
    if (depth <= 0) return;
    for (const n of NAMES) {
      await mkdir(join(at, n));
      await makeTree(join(at, n), depth - 1);
    }
  };
  beforeAll(async () => {
    base = await mkdtemp(join(tmpdir(), "llamadock-tar-paths-"));
    await makeTree(base, DEPTH);
    await mkdir(join(base, ...ROOT));
    await makeTree(join(base, ...ROOT), DEPTH - 2);
  });
  afterAll(async () => void (await rm(base, { recursive: true, force: true })));

  const part = fc.constantFrom("a", "b", "..", ".");
  const path = fc.array(part, { minLength: 1, maxLength: 4 }).map((p) => p.join("/"));
  const target = fc.tuple(fc.boolean(), path).map(([absolute, p]) => (absolute ? `/${p}` : p));
  const place = fc.array(fc.constantFrom("a", "b"), { minLength: 1, maxLength: 2 }).map((p) => p.join("/"));
  // A table of links at distinct places, none under another (an entry under a link is refused before any link is judged).
  const table = fc.array(fc.tuple(place, target), { maxLength: 4 }).map((pairs) => {
    const out = new Map<string, string>();
    for (const [at, to] of pairs) {
      if ([...out.keys()].some((k) => at === k || at.startsWith(`${k}/`) || k.startsWith(`${at}/`))) continue;
      out.set(at, relativeTarget(at.split("/").slice(0, -1), to));
    }
    return out;
  });

  it("inside exactly where the kernel stays inside, at the same place; a loop is never inside", async () => {
    await fc.assert(
      fc.asyncProperty(table, fc.array(fc.constantFrom("a", "b"), { maxLength: 2 }), path, async (links, from, query) => {
        // The folder a link is judged from is a real one (its entry was placed through real folders only).
        if (from.some((_, i) => links.has(from.slice(0, i + 1).join("/")))) return;
        const root = join(base, ...ROOT);
        // The table's links in place of some of the root's folders, for this case only.
        for (const [at, to] of links) {
          await rm(join(root, at), { recursive: true, force: true });
          await symlink(to, join(root, at));
        }
        try {
          const model = resolveInside(links, from, query);
          // Joined as text: path.join would fold `a/..` away before the kernel sees the link.
          const kernel = await realpath([root, ...from, query].join("/")).then(
            (p) => ({ path: p }),
            (error: NodeJS.ErrnoException) => ({ code: error.code }),
          );
          if ("code" in kernel) {
            // Past the tree's depth (ENOENT) the kernel says nothing; through a loop, never inside.
            if (kernel.code === "ELOOP") expect(model).toBeUndefined();
            return;
          }
          // The kernel's answer, as parts from the root (the folder's own realpath: the temporary folder may sit under a link).
          const realRoot = await realpath(root);
          const inside = kernel.path === realRoot || kernel.path.startsWith(realRoot + sep);
          if (inside) expect(model).toEqual(relative(realRoot, kernel.path).split(sep).filter(Boolean));
          else expect(model).toBeUndefined();
        } finally {
          for (const at of links.keys()) {
            await rm(join(root, at));
            await mkdir(join(root, at));
            await makeTree(join(root, at), DEPTH - 2 - at.split("/").length);
          }
        }
      }),
      { numRuns: 150 },
    );
  });
});

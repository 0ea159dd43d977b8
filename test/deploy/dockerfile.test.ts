import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { projectRoot } from "../support/server-process.ts";

// The Dockerfile read as text, for what a build would only show much later: the versions it fetches
// are the ones package.json pins, and its layer order keeps llama.cpp's build out of reach of code
// and dependency changes (the build itself runs in image.test.ts).

const dockerfile = readFileSync(join(projectRoot, "Dockerfile"), "utf8").replace(/\\\n/g, " ");
const pkg = JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as { devDependencies: Record<string, string> };
const dockerignore = readFileSync(join(projectRoot, ".dockerignore"), "utf8").split("\n").filter((l) => l && !l.startsWith("#"));

/** The instructions of each stage, by its name (`final` for the last, unnamed one). */
function stages(): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let current: string[] = [];
  for (const line of dockerfile.split("\n").map((l) => l.trim())) {
    if (!line || line.startsWith("#")) continue;
    const from = /^FROM\s+\S+(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) out.set(from[1] ?? "final", (current = []));
    current.push(line);
  }
  return out;
}

/** The COPY instructions of stage `name`. */
const copies = (name: string) => stages().get(name)!.filter((l) => /^COPY /i.test(l));

const arg = (name: string) => new RegExp(`^ARG ${name}=(\\S+)$`, "m").exec(dockerfile)?.[1];

describe("the Dockerfile", () => {
  it("fetches the Node and Bun that package.json pins", () => {
    expect(arg("NODE_VERSION")).toBe(pkg.devDependencies.node);
    expect(arg("BUN_VERSION")).toBe(pkg.devDependencies.bun);
  });

  it("builds llama-server from the build script alone, so that no code or dependency change rebuilds it", () => {
    expect(copies("llama-server-compile")).toEqual(["COPY --from=node /opt/node /opt/node", "COPY sidecar/build-llama-server.sh /build/"]);
    expect(copies("node")).toEqual([]);
    expect(copies("llama-server-pack")).toEqual([]);
    expect(copies("llama-server")).toEqual(["COPY --from=llama-server-build / /build/"]);
  });

  it("takes the build from one stage that a build context of its name can replace, compilation and all", () => {
    // What replaces it (scripts/image-build.sh's --build-context) is the folder the build script
    // prints; so is what the stage holds, and nothing else reads the compilation.
    expect(stages().get("llama-server-build")).toEqual(["FROM scratch AS llama-server-build", "COPY --from=llama-server-compile /out /"]);
    expect(dockerfile).toMatch(/cp -a "\$dir"\/\. \/out\//);
    const readers = [...stages()].filter(([, lines]) => lines.some((l) => /--from=llama-server-compile\b/.test(l))).map(([name]) => name);
    expect(readers).toEqual(["llama-server-build"]);
  });

  it("copies the code after everything else into the final image", () => {
    const final = stages().get("final")!;
    const copies = final.filter((l) => /^COPY /i.test(l));
    expect(copies.at(-1)).toBe("COPY src ./src");
    expect(copies.findIndex((l) => l.includes("--from=deps"))).toBeLessThan(copies.indexOf("COPY src ./src"));
    expect(final.filter((l) => /^RUN /i.test(l))).toHaveLength(1);
    expect(final.findIndex((l) => /^RUN /i.test(l))).toBeLessThan(final.findIndex((l) => /^COPY /i.test(l)));
  });

  it("sends the build only what it copies", () => {
    const sources = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => m[1]!.split(/\s+/));
    const kept = dockerignore.filter((l) => l.startsWith("!")).map((l) => l.slice(1));
    const covered = (source: string) => kept.some((k) => k === source || k === `${source}/` || (k.endsWith("/") && source.startsWith(k)));
    expect(dockerignore[0]).toBe("*");
    expect(sources.length).toBeGreaterThan(0);
    for (const source of sources) expect(covered(source), source).toBe(true);
    // Nothing else: each kept path is copied.
    for (const path of kept) expect(sources.some((s) => s === path || `${s}/` === path || s.startsWith(path)), path).toBe(true);
  });

  it("runs as the numeric user the manifests name, with a health check on /livez", () => {
    expect(dockerfile).toMatch(/^USER 10001:10001$/m);
    expect(dockerfile).toMatch(/^HEALTHCHECK .*\/livez/m);
  });
});

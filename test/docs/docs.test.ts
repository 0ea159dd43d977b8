import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { settingNames } from "../../src/config.ts";
import { ACCESS } from "../../src/keys/access.ts";

// The docs against the code: every setting the configuration accepts has a row in the reference,
// security.md's table of who may do what is the one the server applies, and every relative link
// between README.md and docs/*.md (and each #anchor) leads somewhere.

const root = resolve(import.meta.dirname, "../..");
const docsDir = join(root, "docs");
const pages = [join(root, "README.md"), ...readdirSync(docsDir).filter((f) => f.endsWith(".md")).map((f) => join(docsDir, f))];

/** The names in the first cell of each table row, where they are written as code: `| `A`, `B` | ...`. */
function documentedNames(markdown: string): Set<string> {
  const names = new Set<string>();
  for (const line of markdown.split("\n")) {
    const cell = /^\|([^|]*)\|/.exec(line)?.[1];
    for (const match of cell?.matchAll(/`([A-Z][A-Z0-9_]*)`/g) ?? []) names.add(match[1]!);
  }
  return names;
}

/** Markdown without its fenced code blocks, whose brackets are not links. */
const prose = (markdown: string) => markdown.replace(/^```[\s\S]*?^```/gm, "");

/** Every link and image target of a page: `[text](target)`, `![alt](target)`. */
function linkTargets(markdown: string): string[] {
  return [...prose(markdown).matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]!);
}

/** The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens, repeats numbered. */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const match of prose(markdown).matchAll(/^#{1,6}\s+(.+?)\s*#*$/gm)) {
    const slug = match[1]!
      .toLowerCase()
      .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count ? `${slug}-${count}` : slug);
  }
  return anchors;
}

/** What is wrong with each relative link of the given pages: a missing file or an anchor no heading has. */
function brokenLinks(files: string[]): string[] {
  const broken: string[] = [];
  for (const file of files) {
    for (const target of linkTargets(readFileSync(file, "utf8"))) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto: ...
      const [path, anchor] = target.split("#") as [string, string | undefined];
      const linked = path ? resolve(dirname(file), decodeURIComponent(path)) : file;
      const where = `${relative(root, file)} -> ${target}`;
      if (!existsSync(linked)) broken.push(`${where}: no such file`);
      else if (anchor !== undefined) {
        if (!linked.endsWith(".md") || statSync(linked).isDirectory()) broken.push(`${where}: an anchor into a file that is not markdown`);
        else if (!headingAnchors(readFileSync(linked, "utf8")).has(anchor)) broken.push(`${where}: no heading with that anchor`);
      }
    }
  }
  return broken;
}

/** The section of the reference for variables other parts read (setup, the command, compose). */
const OUTSIDE_HEADING = "## Outside the server's settings";

describe("the configuration reference", () => {
  const reference = readFileSync(join(docsDir, "configuration.md"), "utf8");

  it("has a row for every setting the configuration accepts", () => {
    expect(settingNames.length).toBeGreaterThan(40); // read from the schema, not an empty list
    const documented = documentedNames(reference);
    expect(settingNames.filter((name) => !documented.has(name))).toEqual([]);
  });

  it("names no setting the configuration does not accept, outside its section on other parts' variables", () => {
    const [settings] = reference.split(OUTSIDE_HEADING);
    expect(reference).toContain(OUTSIDE_HEADING);
    expect([...documentedNames(settings!)].filter((name) => !settingNames.includes(name))).toEqual([]);
  });

  it("misses a setting once its row is gone", () => {
    const name = settingNames[settingNames.length - 1]!;
    const withoutRow = reference.split("\n").filter((line) => !line.startsWith(`| \`${name}\``)).join("\n");
    expect(documentedNames(reference).has(name)).toBe(true);
    expect(documentedNames(withoutRow).has(name)).toBe(false);
  });
});

/** The table under `heading`: each route its first cell names, as `METHOD path`, with its second and third cells. */
function accessTable(markdown: string, heading: string): Map<string, string> {
  const section = markdown.split(heading)[1]?.split(/^## /m)[0] ?? "";
  const rows = new Map<string, string>();
  for (const line of section.split("\n").filter((l) => l.startsWith("| `"))) {
    const [routes, who, text] = line.split(" | ") as [string, string, string];
    for (const match of routes.matchAll(/`([A-Z]+ [^`]+)`/g)) rows.set(match[1]!, `${who} | ${text.replace(/ \|$/, "")}`);
  }
  return rows;
}

describe("security.md's table of who may do what", () => {
  const HEADING = "## Who may do what";
  const documented = accessTable(readFileSync(join(docsDir, "security.md"), "utf8"), HEADING);

  it("is the access table the server applies (src/keys/access.ts), route for route, word for word", () => {
    expect(documented.size).toBeGreaterThan(30);
    expect(Object.fromEntries(documented)).toEqual(Object.fromEntries(ACCESS.map((r) => [`${r.method} ${r.path}`, `${r.access} | ${r.what}: ${r.why}`])));
  });

  it("misses a route once its row says another thing", () => {
    const changed = readFileSync(join(docsDir, "security.md"), "utf8").replace("| `POST /engines/unload` | admin |", "| `POST /engines/unload` | any key |");
    expect(accessTable(changed, HEADING).get("POST /engines/unload")).toMatch(/^any key/);
  });
});

describe("links between the docs", () => {
  it("finds the README and every page of docs/", () => {
    expect(pages.map((p) => relative(root, p))).toEqual(expect.arrayContaining(["README.md", "docs/configuration.md", "docs/api.md"]));
    expect(pages.reduce((n, p) => n + linkTargets(readFileSync(p, "utf8")).length, 0)).toBeGreaterThan(20);
  });

  it("resolve: every relative link names a file that exists, and every anchor a heading in it", () => {
    expect(brokenLinks(pages)).toEqual([]);
  });

  it("gives the anchors GitHub gives", () => {
    const anchors = headingAnchors("# The `llamadock` command\n## What was checked, and what was not\n## Limits\n## Limits\n```\n# not a heading\n```");
    expect([...anchors]).toEqual(["the-llamadock-command", "what-was-checked-and-what-was-not", "limits", "limits-1"]);
  });
});

describe("code blocks that name a test file of the project", () => {
  /** Blocks fenced as ```ts test/x.test.ts: the page shows that file, which the suite runs. */
  const shown = pages.flatMap((page) =>
    [...readFileSync(page, "utf8").matchAll(/^```\w+ (test\/\S+)\n([\s\S]*?)^```$/gm)].map((m) => ({ page: relative(root, page), file: m[1]!, code: m[2]! })),
  );

  it("are found (docs/design.md shows a test by fetch)", () => {
    expect(shown.map((s) => `${s.page} -> ${s.file}`)).toContain("docs/design.md -> test/library/by-fetch.test.ts");
  });

  it("show the file as it is, so the example runs with the suite and cannot drift from it", () => {
    for (const { file, code } of shown) expect(code, file).toBe(readFileSync(join(root, file), "utf8"));
  });
});

// Where a tar entry's name puts it, judged as a filesystem would place it, not as text.
//
// A name is taken only in one plain spelling: parts joined by single slashes, none of them `.` or
// `..` or empty, not absolute; tar writers' leading `./` and a folder's trailing `/` are the only
// decorations allowed. A symbolic link's target is followed through every link the image holds so
// far (links to links, across layers), as the kernel would follow them from the unpacked folder; a
// target that leaves the folder at any step, or loops, is refused. Pure: the unpacker keeps the
// links and asks.

/** The most links followed in one resolution: the kernel's own limit (ELOOP past 40). */
const MAX_HOPS = 40;

/** A name as a message shows it: quoted, and cut short (a PAX record may hold a mebibyte). */
export const quoted = (name: string) => JSON.stringify(name.length > 200 ? `${name.slice(0, 200)}…` : name);

/** An entry's name as its parts from the folder's root, or why it is refused. An empty list is the root itself. */
export function entryParts(name: string): { parts: string[] } | { why: string } {
  if (name.startsWith("/")) return { why: `the entry ${quoted(name)} has an absolute path` };
  const plain = name.replace(/^\.\//, "").replace(/\/$/, "");
  if (plain === "" || plain === ".") return { parts: [] };
  const parts = plain.split("/");
  if (parts.includes("..")) return { why: `the entry ${quoted(name)} climbs out of the archive (..)` };
  if (parts.some((p) => p === "" || p === ".")) return { why: `the entry ${quoted(name)} is not written plainly (an empty or "." part)` };
  if (parts.some((p) => p.includes("\0"))) return { why: `the entry ${quoted(name)} holds a NUL byte` };
  return { parts };
}

/** Links by their path from the root (parts joined by `/`) to their target as written. */
export type LinkTable = ReadonlyMap<string, string>;

/**
 * The path, from the root, that `target` reaches when followed from the folder `from` (parts from
 * the root), through the links in `links`; undefined when it leaves the root or loops. An absolute
 * target is read from the root, as the image's own programs see it (the unpacker writes it so).
 */
export function resolveInside(links: LinkTable, from: readonly string[], target: string): string[] | undefined {
  let hops = 0;
  const walk = (start: readonly string[], path: string): string[] | undefined => {
    const at = path.startsWith("/") ? [] : [...start];
    for (const part of path.split("/")) {
      if (part === "" || part === ".") continue;
      if (part === "..") {
        if (at.length === 0) return undefined;
        at.pop();
        continue;
      }
      at.push(part);
      const link = links.get(at.join("/"));
      if (link === undefined) continue;
      if (++hops > MAX_HOPS) return undefined;
      const reached = walk(at.slice(0, -1), link);
      if (!reached) return undefined;
      at.splice(0, at.length, ...reached);
    }
    return at;
  };
  return walk(from, target);
}

/** An absolute target (`/usr/lib/x`) as the same place written from the link's folder (`../usr/lib/x`). */
export function relativeTarget(from: readonly string[], target: string): string {
  if (!target.startsWith("/")) return target;
  const rest = target.replace(/^\/+/, "");
  return from.length === 0 ? rest || "." : `${"../".repeat(from.length)}${rest}`;
}

// llama.cpp renames flags from release to release (`--draft-max` became `--spec-draft-n-max`,
// `-dio` became `--load-mode dio`, `-cpent` became `-cms`) and drops the old names soon after. A
// build's `--help` says which names it takes: the argv is spelled in those, so one settings file
// serves an older and a newer build alike, and a flag no spelling of which the build takes is named
// before anything starts (see `spellFor`).

/** One way to write a setting: a flag, and for some a value it implies (`--load-mode dio`). */
type Spelling = readonly [flag: string] | readonly [flag: string, value: string];

/** Spellings of one setting across releases, the newest first. */
const RENAMED: readonly (readonly Spelling[])[] = [
  [["--spec-draft-n-max"], ["--draft-max"], ["--draft"], ["--draft-n"]],
  [["--spec-draft-n-min"], ["--draft-min"], ["--draft-n-min"]],
  [["--spec-draft-p-min"], ["--draft-p-min"]],
  [["--spec-draft-model"], ["--model-draft"], ["-md"]],
  [["-cms"], ["--checkpoint-min-step"], ["-cpent"], ["--checkpoint-every-n-tokens"]],
  [["--load-mode", "dio"], ["-lm", "dio"], ["-dio"], ["--direct-io"]],
];

/** Every flag name that some release used for the same setting as `flag` (itself included). */
export function spellingsOf(flag: string): string[] {
  const group = RENAMED.find((g) => g.some((s) => s[0] === flag));
  return group ? [...new Set(group.map((s) => s[0]))] : [flag];
}

/**
 * The flags a `--help` lists: the names at the start of each line that begins with one, up to its
 * description. A flag whose description says it "has been removed" is left out: the build parses
 * it only to fail.
 */
export function parseHelpFlags(help: string): string[] {
  const flags = new Set<string>();
  for (const line of help.split("\n")) {
    if (!line.startsWith("-")) continue;
    // The names end where the description begins: two spaces after something that is not a comma.
    const end = /[^,\s]\s{2,}/.exec(line);
    const names = end ? line.slice(0, end.index + 1) : line;
    if (end && /has been removed/.test(line.slice(end.index))) continue;
    for (const match of names.matchAll(/(?:^|[\s,])(--?[A-Za-z][\w-]*)/g)) flags.add(match[1]!);
  }
  return [...flags];
}

const isFlag = (token: string) => token.startsWith("-") && !/^-\d/.test(token);

/**
 * `args` spelled in the flags the build takes: each flag it lacks is replaced by a spelling it has
 * of the same setting. `missing`: the first flag with none; the argv is then not to be run.
 */
export function spellFor(args: readonly string[], accepted: ReadonlySet<string>): { args: string[]; missing?: undefined } | { missing: string } {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const token = args[i]!;
    if (!isFlag(token)) {
      out.push(token);
      continue;
    }
    const eq = token.indexOf("=");
    const [flag, inline] = eq < 0 ? [token, undefined] : [token.slice(0, eq), token.slice(eq + 1)];
    if (accepted.has(flag)) {
      out.push(token);
      continue;
    }
    const found = respell(flag, inline ?? args[i + 1], accepted);
    if (!found) return { missing: flag };
    // A spelling with its value took the next token (or the inline one) along.
    const tookNext = found.from.length === 2 && inline === undefined;
    const leftInline = found.from.length === 1 ? inline : undefined;
    const [to, value] = found.to;
    out.push(leftInline !== undefined ? `${to}=${leftInline}` : to, ...(value !== undefined ? [value] : []));
    if (tookNext) i++;
  }
  return { args: out };
}

function respell(flag: string, next: string | undefined, accepted: ReadonlySet<string>): { from: Spelling; to: Spelling } | undefined {
  for (const group of RENAMED) {
    const from = group.find((s) => s[0] === flag && (s.length === 1 || s[1] === next));
    if (!from) continue;
    const to = group.find((s) => accepted.has(s[0]));
    if (to) return { from, to };
  }
  return undefined;
}

// What llama-server (v0.5.0) makes of a regular expression in a schema's `pattern`, and of a
// repetition `{m,n}` in a grammar: the same walk as its converter (common/json-schema-to-grammar),
// judging instead of translating. Pure.
//
// Its converter turns only a subset of regular expressions into grammar: anchored `^...$`,
// literals, `.`, classes `[...]`, groups `(...)`/`(?:...)`, `|`, `* + ? {m} {m,} {m,n}`, and the
// escapes \x.. \u.... \t \r \n and of the special characters. Anything else (\d, \w, lookaround,
// an unanchored pattern) it lets pass as "any string", with only a warning in its log.

/** `hang`: llama-server would loop, its memory growing, until killed (a repetition `{m,n}` with m > n). */
export type PatternVerdict = { kind: "ok" } | { kind: "invalid" | "unsupported" | "hang"; why: string };

const ok: PatternVerdict = { kind: "ok" };
const SPECIAL = new Set([..."^$.[]()|{}*+?"]);
const GBNF_ESCAPES = new Set([..."trn\\\"[]-"]);
const HEX_DIGITS: Record<string, number> = { x: 2, u: 4, U: 8 };

/** Length of an escape the grammar itself reads (`\n`, `\x41`...) at `at`, or 0. */
function grammarEscape(pattern: string, at: number): number {
  const next = pattern[at + 1];
  if (next === undefined) return 0;
  if (GBNF_ESCAPES.has(next)) return 2;
  const digits = HEX_DIGITS[next];
  if (digits === undefined) return 0;
  const hex = pattern.slice(at + 2, at + 2 + digits);
  return hex.length === digits && /^[0-9a-fA-F]+$/.test(hex) ? 2 + digits : 0;
}

/** `{m}`, `{m,}`, `{,n}` or `{m,n}` (the text between the braces): its verdict. */
export function repetitionVerdict(inside: string): PatternVerdict {
  const parts = inside.split(",");
  if (parts.length > 2 || !parts.every((part) => /^\s*\d*\s*$/.test(part)) || (parts.length === 1 && !parts[0]!.trim())) {
    return { kind: "unsupported", why: `repetition {${inside}}` };
  }
  const [min, max] = parts.map((part) => (part.trim() ? Number(part) : undefined));
  if (min !== undefined && max !== undefined && min > max) return { kind: "hang", why: `repetition {${inside}} has a minimum above its maximum` };
  return ok;
}

/** llama-server's reading of a schema's `pattern`. */
export function patternVerdict(pattern: string): PatternVerdict {
  if (pattern.length < 2 || !pattern.startsWith("^") || !pattern.endsWith("$")) return { kind: "unsupported", why: "not anchored with ^ and $" };
  const body = pattern.slice(1, -1);
  let depth = 0;
  let canRepeat = false;
  for (let i = 0; i < body.length; ) {
    const c = body[i]!;
    if (c === "(") {
      if (body[i + 1] === "?" && body[i + 2] !== ":") return { kind: "unsupported", why: "group syntax (?...) other than (?:" };
      i += body[i + 1] === "?" ? 3 : 1;
      depth++;
      canRepeat = false;
    } else if (c === ")") {
      if (--depth < 0) return { kind: "invalid", why: "unbalanced parentheses" };
      i++;
      canRepeat = true;
    } else if (c === "^" || c === "$") {
      return { kind: "unsupported", why: "an anchor inside the pattern" };
    } else if (c === "[") {
      const end = classEnd(body, i + 1);
      if (typeof end !== "number") return end;
      i = end + 1;
      canRepeat = true;
    } else if (c === "*" || c === "+" || c === "?") {
      if (!canRepeat) return { kind: "invalid", why: "nothing to repeat" };
      i++;
    } else if (c === "{") {
      const end = body.indexOf("}", i);
      if (end < 0) return { kind: "unsupported", why: "unterminated curly brackets" };
      if (!canRepeat) return { kind: "invalid", why: "nothing to repeat" };
      const verdict = repetitionVerdict(body.slice(i + 1, end));
      if (verdict.kind !== "ok") return verdict;
      i = end + 1;
    } else if (c === "|") {
      i++;
      canRepeat = false;
    } else if (c === "\\") {
      const next = body[i + 1];
      if (next === undefined) return { kind: "invalid", why: "trailing backslash" };
      const length = SPECIAL.has(next) ? 2 : grammarEscape(body, i);
      if (!length) return { kind: "unsupported", why: `the escape \\${next}` };
      i += length;
      canRepeat = true;
    } else if (c === "]" || c === "}") {
      return { kind: "unsupported", why: `a stray ${c}` };
    } else {
      i++;
      canRepeat = true;
    }
  }
  return depth === 0 ? ok : { kind: "invalid", why: "unbalanced parentheses" };
}

/** Index of the `]` closing a class whose content starts at `from`, or the verdict that stops it. */
function classEnd(body: string, from: number): number | PatternVerdict {
  for (let i = from; i < body.length; ) {
    if (body[i] === "]") return i;
    if (body[i] !== "\\") {
      i++;
      continue;
    }
    const length = grammarEscape(body, i);
    if (!length) return { kind: "unsupported", why: `the escape ${body.slice(i, i + 2)} in a character class` };
    i += length;
  }
  return { kind: "invalid", why: "unterminated character class" };
}

/**
 * The first repetition `{m,n}` with m > n in a GBNF grammar, outside its string literals, character
 * classes and comments: llama-server's grammar parser loops on one, its memory growing.
 */
export function hangingRepetition(grammar: string): string | undefined {
  for (let i = 0; i < grammar.length; i++) {
    const c = grammar[i];
    if (c === '"' || c === "[") i = skipQuoted(grammar, i, c === '"' ? '"' : "]");
    else if (c === "#") i = grammar.indexOf("\n", i) < 0 ? grammar.length : grammar.indexOf("\n", i);
    else if (c === "{") {
      const end = grammar.indexOf("}", i);
      if (end < 0) return undefined;
      const inside = grammar.slice(i + 1, end);
      if (repetitionVerdict(inside).kind === "hang") return `{${inside}}`;
      i = end;
    }
  }
  return undefined;
}

/** Index of the closing `close` of a literal or class opened at `at` (escapes skipped). */
function skipQuoted(text: string, at: number, close: string): number {
  for (let i = at + 1; i < text.length; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === close) return i;
  }
  return text.length;
}

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

// Named keys: who a request speaks for, by name. A line of API_KEYS_FILE is a key, then optional
// words: `name=alice`, `admin`, and the key's own limits (`in_flight=4`, `rpm=60`, `tpm=20000`).
// A key given without a name is known by a digest of it (`key-1a2b3c4d`): names, never keys, are
// what logs, metrics and answers show.

export type KeyLimits = {
  /** Requests of the key at once (waiting or served); 0: no limit. */
  inFlight: number;
  /** Requests admitted in any 60 s; 0: no limit. */
  requestsPerMinute: number;
  /** Prompt and completion tokens in any 60 s; 0: no limit. */
  tokensPerMinute: number;
};

export type KeyEntry = { key: string; name: string; admin: boolean; limits: Partial<KeyLimits> };

/** Whom a request speaks for: a named key, or `local` (no keys asked, or the trusted Unix socket). */
export type Caller = { name: string; admin: boolean; limits: KeyLimits };

export class KeyFileError extends Error {}

const LIMIT_WORDS: Record<string, keyof KeyLimits> = { in_flight: "inFlight", rpm: "requestsPerMinute", tpm: "tokensPerMinute" };

/** A name as it may appear in a label and a URL: letters, digits, `._-@`, at most 64. */
const NAME = /^[\w.@-]{1,64}$/;

/** The name a key without one is known by: never the key, a short digest of it. */
export const unnamed = (key: string) => `key-${createHash("sha256").update(key).digest("hex").slice(0, 8)}`;

/** One line of a key file (comments and blank lines are left out before). */
export function parseKeyLine(line: string): KeyEntry {
  const [key, ...words] = line.trim().split(/\s+/);
  const entry: KeyEntry = { key: key!, name: unnamed(key!), admin: false, limits: {} };
  for (const word of words) {
    const [field, value] = word.split("=", 2) as [string, string | undefined];
    if (field === "admin" && value === undefined) entry.admin = true;
    else if (field === "name" && value !== undefined && NAME.test(value)) entry.name = value;
    else if (field in LIMIT_WORDS && value !== undefined && /^\d+$/.test(value)) entry.limits[LIMIT_WORDS[field]!] = Number(value);
    // The key itself is never repeated in the message.
    else throw new KeyFileError(`key ${entry.name}: "${word.replace(key!, "<key>")}" is not name=NAME, admin, in_flight=N, rpm=N or tpm=N`);
  }
  return entry;
}

/** Key entries from a key file's text: one a line, `#` comments; checked as `checkKeyEntries` does. */
export function parseKeyFile(text: string): KeyEntry[] {
  const entries = text
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith("#"))
    .map(parseKeyLine);
  return checkKeyEntries(entries);
}

/**
 * Refuses what would make two callers one: a name given twice, a key given twice, a reserved name.
 * Files, batches, usage and limits belong to a name, so two keys of one name would share them, and
 * a key named `local` or `anonymous` would be taken for the Unix socket's caller or a keyless one.
 * The messages name names, never keys.
 */
export function checkKeyEntries(entries: KeyEntry[]): KeyEntry[] {
  const names = new Set<string>();
  const byDigest = new Map<string, string>();
  for (const { key, name } of entries) {
    const why = RESERVED_NAMES.get(name);
    if (why) throw new KeyFileError(`the name ${name} is reserved (${why}): give the key another`);
    if (names.has(name)) throw new KeyFileError(`the name ${name} is given to two keys`);
    const twin = byDigest.get(digest(key));
    if (twin !== undefined) throw new KeyFileError(`the key named ${name} is the same key as ${twin}: give each key once`);
    names.add(name);
    byDigest.set(digest(key), name);
  }
  return entries;
}

/** The entries of the key file at `path` (a file that cannot be read throws the read's error). */
export const readKeyFile = (path: string): KeyEntry[] => parseKeyFile(readFileSync(path, "utf8"));

export type Keyring = {
  /** Whom `request` speaks for (the guard has already checked its key). */
  identify(request: Request): Caller;
  /** Every key's name. */
  names(): string[];
};

/** The name of a request without a key's identity. */
export const LOCAL = "local";

/** The name of a keyless request on an open path, where keys are asked. */
export const ANONYMOUS = "anonymous";

/** Names the keyring gives callers without a key of their own, and whom they stand for. */
const RESERVED_NAMES = new Map([
  [LOCAL, "the Unix socket's caller, and everyone's where no keys are asked"],
  [ANONYMOUS, "a keyless request on an open path"],
]);

/** Where no keys are asked: every request is `local`, unlimited, and may see all. */
export const LOCAL_CALLER: Caller = { name: LOCAL, admin: true, limits: { inFlight: 0, requestsPerMinute: 0, tokensPerMinute: 0 } };

/**
 * `trusted`: whether a request came on the trusted Unix socket (its peer may do anything). Without
 * keys configured every caller is `local` and may see all; with keys, a keyless request that the
 * guard let through (an open path) is `anonymous` and sees only its own. A key sent on the socket
 * names whose usage the request is, but takes nothing from the socket's rights: its peer could as
 * well have sent none, so it is an admin there.
 */
export function createKeyring(entries: KeyEntry[], defaults: KeyLimits, trusted: (request: Request) => boolean): Keyring {
  const byDigest = new Map(
    entries.map((e) => {
      const caller: Caller = { name: e.name, admin: e.admin, limits: { ...defaults, ...e.limits } };
      return [digest(e.key), { caller, onSocket: { ...caller, admin: true } }];
    }),
  );
  const local: Caller = { name: LOCAL, admin: true, limits: defaults };
  const anonymous: Caller = { name: ANONYMOUS, admin: false, limits: defaults };
  return {
    identify(request) {
      if (byDigest.size === 0) return local;
      const given = givenKey(request);
      const known = given === undefined ? undefined : byDigest.get(digest(given));
      if (known) return trusted(request) ? known.onSocket : known.caller;
      return trusted(request) ? local : anonymous;
    },
    names: () => entries.map((e) => e.name),
  };
}

const digest = (key: string) => createHash("sha256").update(key).digest("base64url");

/** The API key a request carries: `Authorization: Bearer <key>`, else `x-api-key`. */
export function givenKey(request: Request): string | undefined {
  const bearer = /^Bearer\s+(.+)$/i.exec(request.headers.get("authorization") ?? "")?.[1]?.trim();
  return bearer ?? request.headers.get("x-api-key") ?? undefined;
}

// Under node:http (Node and Deno), the global Headers is this lighter one, as the global Response
// is node-response.ts's: name-value pairs in two arrays, checked as the native class checks them.
// Node's Headers (undici's) validates and converts through its WebIDL layer on every call, and
// each request made several (the request's, our call's answer's, the copy forward.ts passes on):
// about a tenth of our CPU per completion in Node's profile. The native class is still the one
// undici's own Request and Response use inside; they take these as any iterable of pairs.

const NativeHeaders = globalThis.Headers;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const BAD_VALUE = /[\0\r\n]/;

/**
 * Names checked already, each with its lowercase form: the same few come with every request and
 * every runner answer, and a check and a new lowercase string per name and call were the largest
 * allocation of our headers (bench/heap-profile.ts). Bounded: emptied when full.
 */
const checkedNames = new Map<string, string>();
const CHECKED_NAMES_KEPT = 512;

function nameOf(name: string, method: string): string {
  const text = String(name);
  const known = checkedNames.get(text);
  if (known !== undefined) return known;
  if (!TOKEN.test(text)) throw new TypeError(`Headers.${method}: "${text}" is an invalid header name.`);
  const lower = text.toLowerCase();
  if (checkedNames.size >= CHECKED_NAMES_KEPT) checkedNames.clear();
  checkedNames.set(text, lower);
  return lower;
}

/** HTTP whitespace (tab, line feed, carriage return, space). */
const isSpace = (code: number) => code === 32 || code === 9 || code === 10 || code === 13;

/** `text` without the HTTP whitespace at either end, which the spec strips (itself when it has none, as most values: no new string). */
function trimmed(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && isSpace(text.charCodeAt(start))) start++;
  while (end > start && isSpace(text.charCodeAt(end - 1))) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

function valueOf(value: string, method: string): string {
  const text = trimmed(String(value));
  if (BAD_VALUE.test(text)) throw new TypeError(`Headers.${method}: "${text}" is an invalid header value.`);
  return text;
}

export class LightHeaders {
  #names: string[] = [];
  #values: string[] = [];

  constructor(init?: HeadersInit | null) {
    if (init === undefined || init === null) return;
    if (typeof init !== "object") throw new TypeError("Headers: the init must be an object");
    if (#names in init) {
      // A copy of a light one (forward.ts copies each answer's): its pairs were checked already.
      this.#names = init.#names.slice();
      this.#values = init.#values.slice();
    } else if (Symbol.iterator in init) {
      for (const pair of init as Iterable<string[]>) {
        if (pair.length !== 2) throw new TypeError("Headers: each header must be a name and a value");
        this.append(pair[0]!, pair[1]!);
      }
    } else {
      for (const [name, value] of Object.entries(init as Record<string, string>)) this.append(name, value);
    }
  }

  /**
   * A native Headers counts as one too (a runtime's own fetch answers with those). Not the other
   * way round: Deno's Response takes an init whose prototype is the native one's for a native
   * Headers and reads its internal list, which this one has not; as a plain iterable it is read
   * as pairs, by every runtime.
   */
  static [Symbol.hasInstance](value: unknown): boolean {
    return value instanceof NativeHeaders || (typeof value === "object" && value !== null && #names in value);
  }

  append(name: string, value: string): void {
    this.#names.push(nameOf(name, "append"));
    this.#values.push(valueOf(value, "append"));
  }

  delete(name: string): void {
    this.#remove(nameOf(name, "delete"), 0);
  }

  /**
   * Every entry of `wanted` (a lowercase name) from index `from` on, the others moved up in place:
   * forward.ts drops five names from every answer's copy, and a splice made an array per entry dropped.
   */
  #remove(wanted: string, from: number): void {
    const names = this.#names;
    const values = this.#values;
    let kept = from;
    for (let i = from; i < names.length; i++) {
      if (names[i] === wanted) continue;
      names[kept] = names[i]!;
      values[kept] = values[i]!;
      kept++;
    }
    names.length = values.length = kept;
  }

  get(name: string): string | null {
    const wanted = nameOf(name, "get");
    let found: string | null = null;
    for (let i = 0; i < this.#names.length; i++) {
      if (this.#names[i] === wanted) found = found === null ? this.#values[i]! : `${found}, ${this.#values[i]}`;
    }
    return found;
  }

  getSetCookie(): string[] {
    return this.#values.filter((_, i) => this.#names[i] === "set-cookie");
  }

  has(name: string): boolean {
    return this.#names.includes(nameOf(name, "has"));
  }

  set(name: string, value: string): void {
    const wanted = nameOf(name, "set");
    const text = valueOf(value, "set");
    const at = this.#names.indexOf(wanted);
    if (at < 0) return void (this.#names.push(wanted), this.#values.push(text));
    this.#values[at] = text;
    this.#remove(wanted, at + 1);
  }

  forEach(callback: (value: string, name: string, parent: Headers) => void, thisArg?: unknown): void {
    for (const [name, value] of this.entries()) callback.call(thisArg, value, name, this as unknown as Headers);
  }

  /** As the native class iterates: sorted by name, a name's values joined, Set-Cookie's apart. */
  *entries(): IterableIterator<[string, string]> {
    const names = this.#names;
    const values = this.#values;
    // Positions sorted by name, a name's in the order added (the sort is stable).
    const order = names.map((_, i) => i).sort((a, b) => (names[a]! < names[b]! ? -1 : names[a]! > names[b]! ? 1 : 0));
    for (let k = 0; k < order.length; k++) {
      const name = names[order[k]!]!;
      let value = values[order[k]!]!;
      if (name !== "set-cookie") while (names[order[k + 1]!] === name) value = `${value}, ${values[order[++k]!]}`;
      yield [name, value];
    }
  }

  /**
   * node:http's flat list of `headers` (name, value, name, value...): a light one's pairs as they
   * are, unsorted and a repeated name's values apart (both mean the same on the wire), which
   * spares the sort and joins of iterating it. Any other iterates.
   */
  static flatList(headers: Iterable<[string, string]>): string[] {
    if (#names in headers) {
      const { length } = headers.#names;
      const flat = new Array<string>(2 * length);
      for (let i = 0; i < length; i++) (flat[2 * i] = headers.#names[i]!), (flat[2 * i + 1] = headers.#values[i]!);
      return flat;
    }
    const flat: string[] = [];
    for (const [name, value] of headers) flat.push(name, value);
    return flat;
  }

  *keys(): IterableIterator<string> {
    for (const [name] of this.entries()) yield name;
  }

  *values(): IterableIterator<string> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }
}

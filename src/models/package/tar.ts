import { badRequest, HttpError } from "../../http/errors.ts";
import { entryParts, quoted as shown } from "./tar-paths.ts";

// The tar format (POSIX ustar) of the model archives `POST /models/load` takes, as Docker Model
// Runner's CLI writes them with Go's archive/tar: 512-byte headers, each entry's bytes padded to a
// 512-byte block, two zero blocks at the end. Sizes past ustar's 8 GiB come as a PAX `size` record
// or in GNU's base-256 form, both read here; the writer uses base-256. The reader streams: an
// entry's bytes are handed on as they arrive, never held whole.
//
// Every entry's name, from the header, a PAX `path` record or a GNU long name, is checked and
// handed on in one plain spelling (tar-paths.ts): an absolute name, a `..`, `.` or empty part
// refuses the whole archive before anything of it is handed on. A model archive never holds a
// link; an engine image's layers do, and the unpacker that asks for them places them itself.

const BLOCK = 512;

/**
 * `name`: the plain spelling (no leading `./`, no trailing `/`; "" for the root); `parts`: its parts;
 * `mode`: the header's permission bits; `link`: a link's target as written (only with `links: "handed-on"`).
 */
export type TarEntry = { name: string; parts: string[]; size: number; type: string; mode: number; link?: string; body: ReadableStream<Uint8Array> };

/**
 * `links: "handed-on"` passes symbolic and hard links to the caller, whose job it is to place them
 * safely (the engine unpacker: unpack.ts); by default any link refuses the archive. `refuse`: the
 * caller's error for an entry refused (a model archive's 400 `unsafe_archive` by default).
 */
export type TarOptions = { links?: "none" | "handed-on"; refuse?: (why: string) => HttpError };

const badArchive = (why: string) => badRequest("invalid_archive", `the model archive is not a valid tar: ${why}`);

const unsafeArchive = (why: string) => badRequest("unsafe_archive", `the model archive is refused: ${why}`);

const slowArchive = (ms: number) => new HttpError(408, "timeout_error", "body_timeout", `the model archive stopped arriving for ${ms / 1000} s`);

/** Bytes of the request body, read in blocks and runs, each read failing after `stallMs` of silence. */
function byteSource(body: ReadableStream<Uint8Array>, stallMs: number) {
  const reader = body.getReader();
  let held: Uint8Array = new Uint8Array(0);
  async function more(): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(slowArchive(stallMs)), stallMs)));
    try {
      const next = await Promise.race([reader.read(), late]);
      if (next.done) return false;
      held = held.byteLength === 0 ? next.value : concat(held, next.value);
      return true;
    } finally {
      clearTimeout(timer);
    }
  }
  return {
    /**
     * Up to `max` bytes (at least one), or undefined at the end of the body. Part of what is held
     * goes out as a copy: the store hands what it writes to its hashing thread, whose transfer
     * would empty the rest of a shared buffer.
     */
    async some(max: number): Promise<Uint8Array | undefined> {
      if (held.byteLength === 0 && !(await more())) return undefined;
      const whole = max >= held.byteLength;
      const taken = whole ? held : held.slice(0, max);
      held = whole ? new Uint8Array(0) : held.subarray(max);
      return taken;
    },
    async exactly(n: number): Promise<Uint8Array | undefined> {
      while (held.byteLength < n) if (!(await more())) return held.byteLength === 0 ? undefined : Promise.reject(badArchive("it ends in the middle of a block"));
      const taken = held.slice(0, n);
      held = held.subarray(n);
      return taken;
    },
    cancel: (reason?: unknown) => reader.cancel(reason).catch(() => {}),
  };
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.byteLength + b.byteLength);
  out.set(a);
  out.set(b, a.byteLength);
  return out;
}

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes.subarray(0, (bytes.indexOf(0) + 1 || bytes.byteLength + 1) - 1));

/** An octal field, or GNU's base-256 (first byte 0x80) for values past it. */
function numberField(bytes: Uint8Array): number {
  if (bytes[0]! & 0x80) {
    let value = 0;
    for (let i = 1; i < bytes.byteLength; i++) value = value * 256 + bytes[i]!;
    return value;
  }
  const digits = text(bytes).trim();
  if (!/^[0-7]*$/.test(digits)) throw badArchive(`a numeric field holds "${digits.slice(0, 20)}"`);
  return digits === "" ? 0 : parseInt(digits, 8);
}

function checksumOk(header: Uint8Array): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : header[i]!;
  return sum === numberField(header.subarray(148, 156));
}

/** What metadata entries (PAX records, GNU long names) say of the next entry. */
type Pending = { path?: string; linkpath?: string; size?: number };

/** PAX extended header records (`<length> <key>=<value>\n`): the path, link target and size they override. */
function paxRecords(bytes: Uint8Array): Pending {
  const out: Pending = {};
  for (const line of new TextDecoder().decode(bytes).split("\n")) {
    const [, key, value] = /^\d+ ([^=]+)=(.*)$/.exec(line) ?? [];
    if (key === "path" || key === "linkpath") out[key] = value;
    if (key === "size" && /^\d+$/.test(value ?? "")) out.size = Number(value);
  }
  return out;
}

const LINKS: Record<string, string> = { "1": "a hard link", "2": "a symbolic link" };

const padding = (size: number) => (BLOCK - (size % BLOCK)) % BLOCK;

/**
 * The archive's entries, in order. Each entry's body must be read (or left: it is then skipped)
 * before the next entry is asked for. Metadata entries (PAX, GNU long names) are applied, not
 * yielded. A malformed archive is a 400; a body that stalls for `stallMs` a 408.
 */
export async function* readTar(body: ReadableStream<Uint8Array>, stallMs: number, options: TarOptions = {}): AsyncGenerator<TarEntry> {
  const source = byteSource(body, stallMs);
  let pending: Pending = {};
  try {
    for (;;) {
      // The end: two zero blocks, or (as some writers leave it) the end of the body between entries.
      const header = await source.exactly(BLOCK);
      if (!header || header.every((b) => b === 0)) return;
      if (!checksumOk(header)) throw badArchive("a header's checksum does not match");
      // Old writers mark a regular file with a NUL instead of "0".
      const type = header[156] === 0 ? "0" : String.fromCharCode(header[156]!);
      const size = pending.size ?? numberField(header.subarray(124, 136));
      const prefix = text(header.subarray(345, 500));
      const name = pending.path ?? (prefix ? `${prefix}/${text(header.subarray(0, 100))}` : text(header.subarray(0, 100)));
      if (type === "x" || type === "g" || type === "L" || type === "K") {
        if (size > 1 << 20) throw badArchive("an extended header is larger than 1 MiB");
        const data = (await source.exactly(size + padding(size)))?.subarray(0, size);
        if (!data) throw badArchive("it ends in an extended header");
        if (type === "x") pending = { ...pending, ...paxRecords(data) };
        if (type === "L") pending = { ...pending, path: text(data) };
        if (type === "K") pending = { ...pending, linkpath: text(data) };
        continue;
      }
      const placed = entryParts(name);
      if ("why" in placed) throw (options.refuse ?? unsafeArchive)(placed.why);
      const link = LINKS[type] ? pending.linkpath ?? text(header.subarray(157, 257)) : undefined;
      if (link !== undefined && options.links !== "handed-on") {
        throw unsafeArchive(`the entry ${shown(name)} is ${LINKS[type]} (to ${shown(link)}): a model archive holds files only`);
      }
      const mode = numberField(header.subarray(100, 108)) & 0o777;
      pending = {};
      let left = size;
      const entry = new ReadableStream<Uint8Array>(
        {
          async pull(controller) {
            if (left === 0) return controller.close();
            const chunk = await source.some(Math.min(left, 1 << 20));
            if (!chunk) return controller.error(badArchive(`it ends in the middle of ${name}`));
            left -= chunk.byteLength;
            controller.enqueue(chunk);
          },
        },
        { highWaterMark: 0 },
      );
      yield { name: placed.parts.join("/"), parts: placed.parts, size, type, mode, ...(link !== undefined ? { link } : {}), body: entry };
      // Whatever the consumer left of the entry, then its padding.
      for (let skip = left + padding(size); skip > 0; ) {
        const chunk = await source.some(Math.min(skip, 1 << 20));
        if (!chunk) throw badArchive(`it ends in the middle of ${name}`);
        skip -= chunk.byteLength;
      }
    }
  } finally {
    await source.cancel();
  }
}

/** What a header may say besides a regular file's name and size: its mode, a folder, a symbolic link. */
export type HeaderOptions = { mode?: number; type?: "0" | "1" | "2" | "5"; link?: string };

/** A ustar header for a regular file (base-256 size past 8 GiB, as GNU tar and Go write it), or as `options` say. */
export function tarHeader(name: string, size: number, mtime = 0, options: HeaderOptions = {}): Uint8Array {
  const header = new Uint8Array(BLOCK);
  const put = (offset: number, value: string) => header.set(new TextEncoder().encode(value), offset);
  if (new TextEncoder().encode(name).byteLength > 100) throw new Error(`tar entry name too long: ${name}`);
  if (new TextEncoder().encode(options.link ?? "").byteLength > 100) throw new Error(`tar link target too long: ${options.link}`);
  put(0, name);
  put(100, `${(options.mode ?? 0o644).toString(8).padStart(7, "0")}\0`);
  put(108, "0000000\0");
  put(116, "0000000\0");
  if (size < 8 ** 11) put(124, `${size.toString(8).padStart(11, "0")}\0`);
  else {
    header[124] = 0x80;
    for (let i = 135, v = size; i > 124; i--, v = Math.floor(v / 256)) header[i] = v % 256;
  }
  put(136, `${Math.floor(mtime).toString(8).padStart(11, "0")}\0`);
  put(156, options.type ?? "0");
  if (options.link !== undefined) put(157, options.link);
  put(257, "ustar\0");
  put(263, "00");
  header.fill(32, 148, 156);
  const sum = header.reduce((a, b) => a + b, 0);
  put(148, `${sum.toString(8).padStart(6, "0")}\0 `);
  return header;
}

/** Zeros that pad an entry of `size` bytes to a whole block. */
export const tarPadding = (size: number) => new Uint8Array(padding(size));

/** The two zero blocks that end an archive. */
export const tarEnd = () => new Uint8Array(2 * BLOCK);

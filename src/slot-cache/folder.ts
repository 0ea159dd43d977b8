import { createHash, randomBytes } from "node:crypto";
import { createReadStream, statSync } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";

// The folder of saved slot caches: llama-server writes and reads the files there (its
// `--slot-save-path`), we decide which. Each entry is `<key hash>-<slot>.bin`, the KV cache and
// tokens as llama-server saved them, and `<key hash>-<slot>.json`, written after the save ended:
// the full key it was saved under, its size and its SHA-256. An entry is handed back only when
// all three match, so a file from other settings, truncated or corrupt is never loaded: it is
// removed. The folder keeps to a byte budget, counting the saves still being written; the least
// recently used entries go first, and a save larger than the whole budget is not kept (it would
// push out every other entry, of every key, and then itself: it is removed at once). Parked
// conversations (src/slot-cache/parking.ts) are entries too, named for their session, not a slot
// (`<key hash>-p<session hash>`): a loading runner never restores them into slots; a session's is
// looked up by name (`isParked`) when the session is placed, so that one parked before a restart or
// a reload, or by another process on the same folder (a replica that stopped), gets its own back.

/** Everything that changes what a slot's cache means: the model's bytes, the engine, the settings. */
export type CacheKey = Record<string, unknown>;

/** Which entry of a key: a slot's number (saved when its runner stopped), or a parked session's name (see parking.ts). */
export type EntryName = number | `p${string}`;

/** `holders`: whose prompts the slot held, by key name, when prompts are kept per key (see per-key.ts). */
type Meta = { key: CacheKey; bytes: number; sha256: string; tokens: number; holders?: string[] };

export type SlotFolder = {
  /** The folder llama-server is given; its names are ours (see `saving`). */
  dir: string;
  /** A fresh file name for llama-server to save one slot into. */
  saving(key: CacheKey, slot: EntryName): string;
  /**
   * Takes a file llama-server saved as an entry, then keeps the folder within its budget: whether
   * it was kept (a file larger than the budget is removed instead).
   */
  commit(file: string, key: CacheKey, slot: EntryName, tokens: number, holders?: string[]): Promise<boolean>;
  /** The key names an entry was saved with (undefined: none were kept). */
  holders(key: CacheKey, slot: EntryName): Promise<string[] | undefined>;
  /** The file name of a sound entry for this key and slot (marked used), or undefined; an unsound one is removed. */
  checkout(key: CacheKey, slot: EntryName): Promise<string | undefined>;
  /**
   * Whether a parked session's entry of this key is in the folder now (its metadata: saved whole),
   * whoever parked it. One `stat`, synchronous: the slot table places a request in one step.
   */
  isParked(key: CacheKey, entry: `p${string}`): boolean;
  /** A save that did not end in time: its file is left to the next prune. */
  abandon(file: string): void;
  /** Removes a file saved for a moment only (a slot copied into others: see copy.ts), never made an entry. */
  drop(file: string): Promise<void>;
  /** Removes an entry (llama-server refused it). */
  discard(key: CacheKey, slot: EntryName): Promise<void>;
  /** Removes saves that never finished and entries past the budget. */
  prune(): Promise<void>;
  /** Removes every entry saved for a model (its key's `model`): the model was deleted. */
  forget(model: string): Promise<void>;
};

const PART = ".part";
/** A save still unfinished after this long was dropped (saves are bounded by seconds). */
const STALE_PART_MS = 10 * 60_000;

export const keyHash = (key: CacheKey): string => createHash("sha256").update(stableJson(key)).digest("hex").slice(0, 32);

function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(",")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

async function fileSha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

export function createSlotFolder(dir: string, budgetBytes: number): SlotFolder {
  const base = (key: CacheKey, slot: EntryName) => `${keyHash(key)}-${slot}`;
  /** Files llama-server may still be writing: a prune leaves them. */
  const writing = new Set<string>();
  // Made again if it was removed meanwhile: llama-server refuses to start without it.
  const made = () => mkdir(dir, { recursive: true }).then(() => undefined);

  /** Saves left unfinished (a save that timed out, a process killed meanwhile); another process's may still be written. */
  async function removeParts(): Promise<void> {
    const names = (await readdir(dir)).filter((n) => n.endsWith(PART) && !writing.has(n));
    const old = Date.now() - STALE_PART_MS;
    await Promise.all(
      names.map(async (n) => {
        const { mtimeMs } = await stat(join(dir, n)).catch(() => ({ mtimeMs: Infinity }));
        if (mtimeMs < old) await rm(join(dir, n), { force: true });
      }),
    );
  }

  async function remove(name: string): Promise<void> {
    await Promise.all([rm(join(dir, `${name}.bin`), { force: true }), rm(join(dir, `${name}.json`), { force: true })]);
  }

  async function sound(name: string, key: CacheKey): Promise<boolean> {
    try {
      const meta = JSON.parse(await readFile(join(dir, `${name}.json`), "utf8")) as Meta;
      if (stableJson(meta.key) !== stableJson(key)) return false;
      const file = join(dir, `${name}.bin`);
      if ((await stat(file)).size !== meta.bytes) return false;
      return (await fileSha256(file)) === meta.sha256;
    } catch {
      return false;
    }
  }

  /** Entries by last use, oldest first: a checkout touches the metadata file's times. */
  async function entries(): Promise<{ name: string; bytes: number; used: number }[]> {
    const names = (await readdir(dir).catch(() => [] as string[])).filter((n) => n.endsWith(".bin"));
    const found = await Promise.all(
      names.map(async (n) => {
        const name = n.slice(0, -4);
        const [bin, meta] = await Promise.all([stat(join(dir, n)).catch(() => undefined), stat(join(dir, `${name}.json`)).catch(() => undefined)]);
        return bin && { name, bytes: bin.size, used: meta?.mtimeMs ?? 0 };
      }),
    );
    return found.filter((e) => e !== undefined).sort((a, b) => a.used - b.used);
  }

  return {
    dir,
    saving(key, slot) {
      const name = `${base(key, slot)}.${randomBytes(4).toString("hex")}${PART}`;
      writing.add(name);
      return name;
    },
    async commit(file, key, slot, tokens, holders) {
      try {
        await made();
        const path = join(dir, file);
        const { size } = await stat(path);
        if (size > budgetBytes) {
          await rm(path, { force: true });
          return false;
        }
        const sha256 = await fileSha256(path);
        const name = base(key, slot);
        // The metadata goes last: an entry without it is never handed back.
        await rm(join(dir, `${name}.json`), { force: true });
        await rename(path, join(dir, `${name}.bin`));
        const meta: Meta = { key, bytes: size, sha256, tokens, ...(holders ? { holders } : {}) };
        await writeFile(join(dir, `${name}.json.tmp`), JSON.stringify(meta));
        await rename(join(dir, `${name}.json.tmp`), join(dir, `${name}.json`));
      } finally {
        writing.delete(file);
      }
      await this.prune();
      return true;
    },
    async checkout(key, slot) {
      await made();
      const name = base(key, slot);
      const bin = await stat(join(dir, `${name}.bin`)).catch(() => undefined);
      if (!bin) return undefined;
      if (!(await sound(name, key))) {
        console.error(`slot cache: ${name}.bin does not match its runner or is damaged: removed`);
        await remove(name);
        return undefined;
      }
      const now = new Date();
      await utimes(join(dir, `${name}.json`), now, now).catch(() => {});
      return `${name}.bin`;
    },
    async holders(key, slot) {
      const meta = await readFile(join(dir, `${base(key, slot)}.json`), "utf8").then((text) => JSON.parse(text) as Meta, () => undefined);
      return meta?.holders;
    },
    isParked(key, entry) {
      // Only the name is looked at here; a checkout still checks the entry against the key, size and digest.
      try {
        return statSync(join(dir, `${base(key, entry)}.json`), { throwIfNoEntry: false }) !== undefined;
      } catch {
        return false; // a folder that cannot be read holds nothing for us
      }
    },
    abandon: (file) => void writing.delete(file),
    async drop(file) {
      writing.delete(file);
      await rm(join(dir, file), { force: true });
    },
    discard: async (key, slot) => remove(base(key, slot)),
    async forget(model) {
      const metas = (await readdir(dir).catch(() => [] as string[])).filter((n) => n.endsWith(".json"));
      const keyOf = async (name: string) => ((JSON.parse(await readFile(join(dir, name), "utf8")) as Meta).key ?? {}).model;
      await Promise.all(metas.map(async (n) => ((await keyOf(n).catch(() => undefined)) === model ? remove(n.slice(0, -5)) : undefined)));
    },
    async prune() {
      await made();
      await removeParts();
      const all = await entries();
      // Saves being written count too: two at once must not each find the room the other takes.
      const pending = await Promise.all([...writing].map((n) => stat(join(dir, n)).then((s) => s.size, () => 0)));
      let total = pending.reduce((a, b) => a + b, 0);
      for (const e of all) total += e.bytes;
      for (const e of all) {
        if (total <= budgetBytes) break;
        await remove(e.name);
        total -= e.bytes;
      }
    },
  };
}

import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import * as z from "zod";
import type { EngineBuild } from "../../sidecar/index.ts";
import { folderBytes, freeSpace, writeFileAtomic } from "../models/store/files.ts";
import { LEASE_HEARTBEAT } from "../models/store/leases.ts";
import { sight } from "../models/store/lock-file.ts";
import { newOwner, pidAlive, staleReason, thisProcess, type Heartbeat } from "../models/store/owner.ts";
import { badRequest, HttpError } from "../http/errors.ts";

// The engine store: llama.cpp builds side by side, each in a folder named by its manifest's digest
//   <root>/<hex>/engine.json    what the build is (written last: a folder without it is a leftover)
//   <root>/<hex>/image/...      the unpacked image
//   <root>/default.json         the build `engine use` chose as the default
//   <root>/.incoming-<uuid>/    a pull in progress; its `owner.json` names the process pulling,
//                               which touches it while the pull runs (several processes may share
//                               the store): a purge removes only a folder whose puller is gone
// Builds are named by the tag they were pulled under, their reference, or their digest (a
// 12-hex prefix will do); `builtin` is the llama-server found as before (LLAMA_SERVER_PATH, PATH,
// the setup's build).

export const BUILTIN = "builtin";

export const EngineRecord = z.object({
  /** The tag it was pulled under (`b6100`, `server-cuda-b6100`). */
  name: z.string().min(1),
  reference: z.string().min(1),
  digest: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  layout: z.enum(["llama.cpp", "docker-model-runner"]),
  variant: z.string(),
  /** Inside `image/`. */
  binary: z.string().min(1),
  libraryDirs: z.array(z.string()),
  /** Its `--version` and the flags its `--help` lists, read once at its pull. */
  version: z.string(),
  flags: z.array(z.string()),
  /** The layers' bytes, as their descriptors say. */
  size: z.number().int().nonnegative(),
  pulledAt: z.string(),
});
export type EngineRecord = z.infer<typeof EngineRecord>;

export const engineNotFound = (name: string) => new HttpError(404, "not_found_error", "engine_not_found", `no engine build named ${JSON.stringify(name.slice(0, 200))}: see GET /engines/builds`);

const hexOf = (digest: string) => digest.slice("sha256:".length);

export type EngineStore = ReturnType<typeof openEngineStore>;

/** The file in a pull's folder that names its process, touched as a lease is (see models/store/leases.ts). */
const OWNER_FILE = "owner.json";

export function openEngineStore(root: string, heartbeat: Heartbeat = LEASE_HEARTBEAT) {
  const folder = (digest: string) => join(root, hexOf(digest));
  const recordFile = (digest: string) => join(folder(digest), "engine.json");
  /** This process's pulls in progress, by folder: never a leftover. */
  const pulling = new Set<string>();

  /** Whether a pull's folder was left by a process that is gone (undefined: its puller may still run). */
  async function abandoned(dir: string): Promise<boolean> {
    if (pulling.has(dir)) return false;
    const judge = { self: thisProcess(), now: Date.now(), heartbeat, alive: pidAlive };
    // Without its owner file (written just after the folder, removed just before it becomes a
    // build) the folder's own age judges it.
    const seen = (await sight(join(dir, OWNER_FILE)).catch(() => undefined)) ?? { owner: undefined, mtimeMs: (await stat(dir).catch(() => undefined))?.mtimeMs ?? 0 };
    return staleReason(seen, judge) !== undefined;
  }

  async function list(): Promise<EngineRecord[]> {
    const names = await readdir(root).catch(() => [] as string[]);
    const records = await Promise.all(names.filter((n) => /^[0-9a-f]{64}$/.test(n)).map((n) => readRecord(join(root, n, "engine.json"))));
    return records.filter((r): r is EngineRecord => r !== undefined).sort((a, b) => a.pulledAt.localeCompare(b.pulledAt));
  }

  /** The build a name names: its tag, its reference, its digest or a 12-hex prefix of it. */
  async function find(name: string): Promise<EngineRecord | undefined> {
    const records = await list();
    const hex = name.replace(/^sha256:/, "");
    const matches = records.filter((r) => r.reference === name || r.digest === name || (/^[0-9a-f]{12,64}$/.test(hex) && hexOf(r.digest).startsWith(hex)));
    // Tags last: a tag pulled twice (two references) is ambiguous, the newest pull wins.
    return matches[0] ?? records.filter((r) => r.name === name).at(-1);
  }

  /** The build's llama-server, as the sidecar runs it. */
  const build = (r: EngineRecord): EngineBuild => ({
    name: r.name,
    path: join(folder(r.digest), "image", r.binary),
    version: r.version,
    digest: r.digest,
    flags: r.flags,
    libraryDirs: r.libraryDirs.map((d) => join(folder(r.digest), "image", d)),
  });

  return {
    root,
    list,
    find,
    build,
    folder,
    /** A folder for a pull to unpack into; `commit` moves it in place, under its record (false: the build was there already). */
    async incoming(): Promise<{ dir: string; commit(record: EngineRecord): Promise<boolean>; discard(): Promise<void> }> {
      const dir = join(root, `.incoming-${crypto.randomUUID()}`);
      const owner = join(dir, OWNER_FILE);
      pulling.add(dir);
      const beat = setInterval(() => {
        const now = new Date();
        utimes(owner, now, now).catch(() => {});
      }, heartbeat.everyMs);
      beat.unref?.();
      const done = () => {
        clearInterval(beat);
        pulling.delete(dir);
      };
      try {
        await mkdir(dir, { recursive: true });
        await writeFile(owner, JSON.stringify(newOwner()));
      } catch (error) {
        done();
        throw error;
      }
      return {
        dir,
        async commit(record) {
          try {
            // Another process sharing the store may have put the same build there meanwhile, and run
            // it since: its folder stays; only a leftover without a record is replaced.
            if (await readRecord(recordFile(record.digest))) {
              await rm(dir, { recursive: true, force: true });
              return false;
            }
            await rm(folder(record.digest), { recursive: true, force: true });
            await writeFile(join(dir, "engine.json"), `${JSON.stringify(record, null, 2)}\n`);
            await rm(owner, { force: true });
            await rename(dir, folder(record.digest));
            return true;
          } finally {
            done();
          }
        },
        discard: () => rm(dir, { recursive: true, force: true }).finally(done),
      };
    },
    async remove(record: EngineRecord): Promise<number> {
      const bytes = await folderBytes(folder(record.digest));
      // The record first: a half-removed folder is a leftover, never a build.
      await rm(recordFile(record.digest), { force: true });
      await rm(folder(record.digest), { recursive: true, force: true });
      return bytes;
    },
    /**
     * Folders left by pulls that never finished (their process is gone: a pull in progress, here or
     * in another process on the store, keeps its folder), and builds' folders without a record.
     */
    async removeLeftovers(): Promise<{ files: number; bytes: number }> {
      const names = await readdir(root).catch(() => [] as string[]);
      let bytes = 0;
      let files = 0;
      for (const name of names) {
        const leftover = name.startsWith(".incoming-") ? await abandoned(join(root, name)) : /^[0-9a-f]{64}$/.test(name) && !(await readRecord(join(root, name, "engine.json")));
        if (!leftover) continue;
        bytes += await folderBytes(join(root, name));
        files++;
        await rm(join(root, name), { recursive: true, force: true });
      }
      return { files, bytes };
    },
    bytes: () => folderBytes(root),
    /** Free bytes on the store's filesystem (undefined when unknown), as the model store measures its own. */
    freeSpace: () => freeSpace(root),
    async defaultName(): Promise<string | undefined> {
      return (await readJsonFile(join(root, "default.json"), DefaultChoice))?.name;
    },
    async setDefault(name: string | undefined): Promise<void> {
      if (name === undefined) return void (await rm(join(root, "default.json"), { force: true }));
      await writeFileAtomic(join(root, "default.json"), `${JSON.stringify({ name })}\n`, { durable: false });
    },
  };
}

const readRecord = (file: string) => readJsonFile(file, EngineRecord);

const DefaultChoice = z.object({ name: z.string().min(1) });

/** A small JSON file of ours, checked; undefined when it is missing, unreadable or not of that shape. */
async function readJsonFile<T>(file: string, schema: z.ZodType<T>): Promise<T | undefined> {
  const text = await readFile(file, "utf8").catch(() => undefined);
  if (text === undefined) return undefined;
  try {
    const parsed = schema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** A name as the API takes it: printable, short. */
export function checkName(name: string): string {
  if (!/^[\x21-\x7e]{1,300}$/.test(name)) throw badRequest("invalid_engine", "an engine is named by its tag, its reference or its digest");
  return name;
}

import { open } from "node:fs/promises";

// A llama.cpp build is linked against the C library of the system it was built on: run on a host
// whose glibc is older, it dies at once with a loader error naming a symbol version. What a file
// needs is written in it (the ELF's version needs, `GLIBC_2.38` ...), and what the host has is
// written in its libc.so.6 (its version definitions): both are read here, so a build the host
// cannot run is refused with one clear line before anything of it runs. ELF64 little-endian only
// (the x86-64 and arm64 builds llama.cpp publishes).

const SHT_GNU_VERDEF = 0x6ffffffd;
const SHT_GNU_VERNEED = 0x6ffffffe;

type Section = { type: number; offset: number; size: number; link: number };

/** The glibc version names (`GLIBC_2.34`) a file needs, or defines; [] for a file that is no ELF64 LE. */
async function versionNames(path: string, kind: "needs" | "defines"): Promise<string[]> {
  const file = await open(path, "r");
  try {
    const read = async (offset: number, length: number) => {
      const buffer = Buffer.alloc(length);
      const { bytesRead } = await file.read(buffer, 0, length, offset);
      return buffer.subarray(0, bytesRead);
    };
    const header = await read(0, 64);
    if (header.length < 64 || header.readUInt32BE(0) !== 0x7f454c46 || header[4] !== 2 || header[5] !== 1) return [];
    const shoff = Number(header.readBigUInt64LE(0x28));
    const shentsize = header.readUInt16LE(0x3a);
    const shnum = header.readUInt16LE(0x3c);
    if (shnum === 0 || shentsize < 64 || shnum > 4096) return [];
    const table = await read(shoff, shnum * shentsize);
    const sections: Section[] = [];
    for (let i = 0; i < shnum && (i + 1) * shentsize <= table.length; i++) {
      const at = i * shentsize;
      sections.push({ type: table.readUInt32LE(at + 4), offset: Number(table.readBigUInt64LE(at + 0x18)), size: Number(table.readBigUInt64LE(at + 0x20)), link: table.readUInt32LE(at + 0x28) });
    }
    const wanted = sections.find((s) => s.type === (kind === "needs" ? SHT_GNU_VERNEED : SHT_GNU_VERDEF));
    const strings = wanted && sections[wanted.link];
    if (!wanted || !strings || wanted.size > 1 << 20 || strings.size > 64 << 20) return [];
    const body = await read(wanted.offset, wanted.size);
    const names = await read(strings.offset, strings.size);
    const nameAt = (offset: number) => names.subarray(offset, names.indexOf(0, offset)).toString("latin1");
    return (kind === "needs" ? needed(body) : defined(body)).map(nameAt).filter((name) => name.startsWith("GLIBC_2."));
  } finally {
    await file.close();
  }
}

/** Name offsets of every Vernaux entry of every Verneed entry. */
function needed(body: Buffer): number[] {
  const out: number[] = [];
  for (let at = 0, guard = 0; at + 16 <= body.length && guard < 1024; guard++) {
    const count = body.readUInt16LE(at + 2);
    for (let aux = at + body.readUInt32LE(at + 8), i = 0; i < count && aux + 16 <= body.length; i++) {
      out.push(body.readUInt32LE(aux + 8));
      const next = body.readUInt32LE(aux + 12);
      if (next === 0) break;
      aux += next;
    }
    const next = body.readUInt32LE(at + 12);
    if (next === 0) break;
    at += next;
  }
  return out;
}

/** Name offsets of the first Verdaux entry (the version's own name) of every Verdef entry. */
function defined(body: Buffer): number[] {
  const out: number[] = [];
  for (let at = 0, guard = 0; at + 20 <= body.length && guard < 1024; guard++) {
    const aux = at + body.readUInt32LE(at + 12);
    if (aux + 8 <= body.length) out.push(body.readUInt32LE(aux));
    const next = body.readUInt32LE(at + 16);
    if (next === 0) break;
    at += next;
  }
  return out;
}

/** `GLIBC_2.38` as [2, 38]. */
const versionOf = (name: string) => name.slice("GLIBC_".length).split(".").map(Number);

const newer = (a: number[], b: number[]) => {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  return false;
};

/** The newest of some version names; undefined for none. */
export function newest(names: string[]): string | undefined {
  return names.reduce<string | undefined>((best, name) => (best === undefined || newer(versionOf(name), versionOf(best)) ? name : best), undefined);
}

/** The newest glibc version any of `files` needs. */
export async function neededGlibc(files: string[]): Promise<string | undefined> {
  const names = await Promise.all(files.map((f) => versionNames(f, "needs").catch(() => [])));
  return newest(names.flat());
}

/** Where a glibc host keeps libc.so.6 (Debian's multiarch folders, then the others'). */
const HOST_LIBC = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6", "/lib/libc.so.6", "/usr/lib/libc.so.6"];

/** The newest glibc version this host's C library defines; undefined on a host without glibc (musl, macOS). */
export async function hostGlibc(candidates = HOST_LIBC): Promise<string | undefined> {
  for (const path of candidates) {
    const names = await versionNames(path, "defines").catch(() => undefined);
    if (names?.length) return newest(names);
  }
  return undefined;
}

/** Why the host cannot run a build that needs `needed`; undefined when it can. */
export function glibcRefusal(needed: string | undefined, host: string | undefined): string | undefined {
  if (needed === undefined) return undefined;
  if (host === undefined) return `it needs ${needed} and this host has no glibc`;
  return newer(versionOf(needed), versionOf(host)) ? `it needs ${needed} and this host's C library is ${host}` : undefined;
}

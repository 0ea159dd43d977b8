import { lstat, mkdtemp, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { tarEnd, tarHeader, tarPadding } from "../../src/models/package/tar.ts";
import { markExecutable, unpackLayer, type Modes } from "../../src/engines/unpack.ts";

// An engine layer unpacked on a real disk: links that stay inside are kept, any that leads out,
// and any entry written through a link, refuse the whole layer; execute bits only where the
// layout says.

type Entry = { name: string; data?: string; link?: string; mode?: number };

function tar(entries: Entry[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const e of entries) {
    if (e.link !== undefined) parts.push(tarHeader(e.name, 0, 0, { type: "2", link: e.link }));
    else {
      const bytes = new TextEncoder().encode(e.data ?? "");
      parts.push(tarHeader(e.name, bytes.byteLength, 0, { mode: e.mode ?? 0o644 }), bytes, tarPadding(bytes.byteLength));
    }
  }
  parts.push(tarEnd());
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  parts.reduce((at, p) => (out.set(p, at), at + p.byteLength), 0);
  return out;
}

describe("unpacking an engine layer", () => {
  let dir: string;
  beforeEach(async () => void (dir = await mkdtemp(join(tmpdir(), "llamadock-unpack-"))));
  afterEach(async () => void (await rm(dir, { recursive: true, force: true })));

  const unpack = async (entries: Entry[], modes: Modes = new Map()) => {
    await writeFile(join(dir, "layer.tar"), tar(entries));
    await unpackLayer(join(dir, "layer.tar"), false, join(dir, "image"), modes);
    return modes;
  };

  it("keeps links inside, and gives execute bits back only in the folders named", async () => {
    const modes = await unpack([
      { name: "app/llama-server", data: "#!/bin/sh\n", mode: 0o755 },
      { name: "app/libggml.so.0", data: "lib", mode: 0o755 },
      { name: "app/libggml.so", link: "libggml.so.0" },
      { name: "etc/tool", data: "#!/bin/sh\n", mode: 0o755 },
    ]);
    await markExecutable(join(dir, "image"), ["app"], modes);
    expect(await readlink(join(dir, "image/app/libggml.so"))).toBe("libggml.so.0");
    expect((await lstat(join(dir, "image/app/llama-server"))).mode & 0o777).toBe(0o755);
    expect((await lstat(join(dir, "image/etc/tool"))).mode & 0o111).toBe(0);
  });

  it("refuses a link that leads out, and an entry written through a link", async () => {
    await expect(unpack([{ name: "app/lib.so", link: "../../etc/passwd" }])).rejects.toMatchObject({ status: 400, code: "unsafe_archive" });
    await expect(unpack([{ name: "app/abs", link: "/etc/passwd" }])).rejects.toMatchObject({ code: "unsafe_archive" });
    await expect(unpack([{ name: "app/up", link: ".." }, { name: "app/up/x", data: "x" }])).rejects.toMatchObject({ code: "unsafe_engine", message: expect.stringMatching(/under a symbolic link/) });
    await expect(unpack([{ name: "../escape", data: "x" }])).rejects.toMatchObject({ code: "unsafe_archive" });
  });
});

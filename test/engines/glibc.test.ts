import { readdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { env } from "node:process";
import { describe, expect, it } from "vitest";
import { resolveLlamaServerBinary } from "../../sidecar/index.ts";
import { glibcRefusal, hostGlibc, neededGlibc, newest } from "../../src/engines/glibc.ts";
import { detectRuntime } from "../../src/runtime/index.ts";

// The C library a build needs against the host's, read from the ELF files themselves.

describe("glibc versions", () => {
  it("reads the host's glibc from its libc.so.6 and what the setup's build needs, which the host has", async () => {
    const host = await hostGlibc();
    expect(host).toMatch(/^GLIBC_2\.\d+$/);
    const folder = dirname((await resolveLlamaServerBinary({ runtime: await detectRuntime(), env })).path);
    const needed = await neededGlibc((await readdir(folder)).map((f) => join(folder, f)));
    expect(needed).toMatch(/^GLIBC_2\.\d+$/);
    expect(glibcRefusal(needed, host)).toBeUndefined();
  });

  it("compares versions as numbers and says why a build is refused", () => {
    expect(newest(["GLIBC_2.9", "GLIBC_2.34", "GLIBC_2.2.5"])).toBe("GLIBC_2.34");
    expect(glibcRefusal("GLIBC_2.39", "GLIBC_2.36")).toBe("it needs GLIBC_2.39 and this host's C library is GLIBC_2.36");
    expect(glibcRefusal("GLIBC_2.36", "GLIBC_2.36")).toBeUndefined();
    expect(glibcRefusal("GLIBC_2.17", undefined)).toBe("it needs GLIBC_2.17 and this host has no glibc");
    expect(glibcRefusal(undefined, undefined)).toBeUndefined();
  });

  it("finds nothing needed in a file that is no ELF, and no glibc where no libc.so.6 is", async () => {
    expect(await neededGlibc([join(import.meta.dirname, "glibc.test.ts")])).toBeUndefined();
    expect(await hostGlibc([join(import.meta.dirname, "no-such-libc.so.6")])).toBeUndefined();
  });
});

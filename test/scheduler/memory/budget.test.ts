import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cgroupMemoryLimit, memoryBudget, parseBytes, parseNvidiaSmi } from "../../../src/scheduler/memory/budget.ts";
import { detectBudget, queryGpus } from "../../../src/scheduler/memory/detect.ts";
import { nodeRuntime } from "../../../src/runtime/node.ts";

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

/** What `nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader,nounits` prints. */
const TWO_GPUS = "0, NVIDIA H100 80GB HBM3, 81559, 81007\n1, NVIDIA GeForce RTX 4090, 24564, 23908\n";

describe("parseNvidiaSmi", () => {
  it.each<[string, string, { index: number; name: string; totalBytes: number; freeBytes: number }[]]>([
    ["two devices", TWO_GPUS, [
      { index: 0, name: "NVIDIA H100 80GB HBM3", totalBytes: 81559 * MIB, freeBytes: 81007 * MIB },
      { index: 1, name: "NVIDIA GeForce RTX 4090", totalBytes: 24564 * MIB, freeBytes: 23908 * MIB },
    ]],
    ["a name with a comma", "0, Tesla T4, rev A, 15360, 15100", [{ index: 0, name: "Tesla T4, rev A", totalBytes: 15360 * MIB, freeBytes: 15100 * MIB }]],
    ["unreadable lines are skipped", "No devices were found\n0, X, [N/A], [N/A]\n", []],
    ["nothing", "", []],
  ])("%s", (_, output, devices) => {
    expect(parseNvidiaSmi(output)).toEqual(devices);
  });
});

describe("cgroupMemoryLimit", () => {
  it.each<[object, number | undefined]>([
    [{ memoryMax: "max\n" }, undefined],
    [{ memoryMax: "4294967296\n" }, 4 * GIB],
    [{ v1Limit: "9223372036854771712\n" }, undefined],
    [{ v1Limit: "2147483648" }, 2 * GIB],
    [{}, undefined],
  ])("%j -> %s", (files, limit) => {
    expect(cgroupMemoryLimit(files)).toBe(limit);
  });
});

describe("parseBytes", () => {
  it.each<[string, number]>([["8GiB", 8 * GIB], ["512MiB", 512 * MIB], ["2g", 2e9], ["1000000", 1e6], ["1.5 GiB", 1.5 * GIB], ["64kb", 64e3]])("%s", (text, bytes) => {
    expect(parseBytes(text)).toBe(bytes);
  });
  it("refuses what it cannot read", () => expect(() => parseBytes("lots")).toThrow(/invalid size/));
});

describe("memoryBudget", () => {
  const gpus = parseNvidiaSmi(TWO_GPUS);
  it.each<[string, Parameters<typeof memoryBudget>[0], { where: string; bytes: number; source: string }]>([
    ["the GPUs' free memory less the reserve", { gpus, systemBytes: 64 * GIB, reserve: GIB }, { where: "gpu", bytes: (81007 + 23908) * MIB - GIB, source: "detected" }],
    ["system memory when no GPU", { gpus: [], systemBytes: 64 * GIB, reserve: GIB }, { where: "cpu", bytes: 63 * GIB, source: "detected" }],
    ["capped by the cgroup", { gpus: [], systemBytes: 64 * GIB, cgroupBytes: 8 * GIB, reserve: GIB }, { where: "cpu", bytes: 7 * GIB, source: "detected" }],
    ["a setting is taken as it is", { gpus, systemBytes: 64 * GIB, setting: 10 * GIB, reserve: GIB }, { where: "gpu", bytes: 10 * GIB, source: "setting" }],
    ["never below zero", { gpus: [], systemBytes: GIB, reserve: 2 * GIB }, { where: "cpu", bytes: 0, source: "detected" }],
  ])("%s", (_, inputs, expected) => {
    expect(memoryBudget(inputs)).toMatchObject(expected);
  });

  it("beside GPUs, a host budget for the runners' caches: system memory (cgroup-capped) less the reserve", () => {
    expect(memoryBudget({ gpus, systemBytes: 64 * GIB, cgroupBytes: 16 * GIB, reserve: GIB }).hostBytes).toBe(15 * GIB);
    expect(memoryBudget({ gpus, systemBytes: 64 * GIB, setting: 10 * GIB, reserve: GIB }).hostBytes).toBe(63 * GIB);
    expect(memoryBudget({ gpus: [], systemBytes: 64 * GIB, reserve: GIB }).hostBytes).toBeUndefined();
  });
});

// The GPU path with a stand-in nvidia-smi first on PATH: a script printing what the real one prints.
describe("detection with nvidia-smi on PATH", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "llamadock-smi-"));
    const script = `#!/bin/sh\n[ "$1" = "--query-gpu=index,name,memory.total,memory.free" ] && [ "$2" = "--format=csv,noheader,nounits" ] || exit 9\nprintf '${TWO_GPUS.replace(/\n/g, "\\n")}'\n`;
    await writeFile(join(dir, "nvidia-smi"), script);
    await chmod(join(dir, "nvidia-smi"), 0o755);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it("finds the devices and budgets their free memory", async () => {
    const env = { PATH: `${dir}:${process.env.PATH}` };
    expect((await queryGpus(nodeRuntime, env)).map((d) => d.name)).toEqual(["NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"]);
    const budget = await detectBudget(nodeRuntime, env, { reserve: GIB, gpu: true });
    expect(budget).toMatchObject({ where: "gpu", bytes: (81007 + 23908) * MIB - GIB });
  });

  it("falls back to system memory when nvidia-smi is absent, fails, or the GPU is off", async () => {
    expect(await queryGpus(nodeRuntime, { PATH: "/nonexistent" })).toEqual([]);
    await writeFile(join(dir, "nvidia-smi"), "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n");
    expect(await queryGpus(nodeRuntime, { PATH: dir })).toEqual([]);
    const off = await detectBudget(nodeRuntime, { PATH: dir }, { reserve: 0, gpu: false });
    expect(off.where).toBe("cpu");
    expect(off.bytes).toBeGreaterThan(0);
  });
});

import { describe, expect, it } from "vitest";
import { offloadDevices, resolveLlamaServerBinary } from "../../sidecar/index.ts";
import { execFileSync } from "node:child_process";
import { launchEnv, parseListDevices, parseVersion } from "../../sidecar/binary.ts";
import { detectRuntime } from "../../src/runtime/index.ts";

// Whether llama-server can offload to a GPU: what `--list-devices` lists.

describe("parseListDevices", () => {
  it.each<[string, string, string[]]>([
    ["a CPU-only build", "I srv  llama_server: initializing ...\nAvailable devices:\n  (none)\n", []],
    [
      "a CUDA build with two GPUs",
      "ggml_cuda_init: found 2 CUDA devices:\nAvailable devices:\n  CUDA0: NVIDIA H100 80GB HBM3 (81007 MiB, 80468 MiB free)\n  CUDA1: NVIDIA GeForce RTX 4090 (24080 MiB, 23500 MiB free)\n",
      ["CUDA0: NVIDIA H100 80GB HBM3 (81007 MiB, 80468 MiB free)", "CUDA1: NVIDIA GeForce RTX 4090 (24080 MiB, 23500 MiB free)"],
    ],
    ["no such section", "error: invalid argument: --list-devices\n", []],
  ])("%s", (_, output, devices) => {
    expect(parseListDevices(output)).toEqual(devices);
  });
});

describe("parseVersion", () => {
  it.each<[string, string, string | undefined]>([
    ["a plain line", "version: 0.5.0-dev (build 1, commit de3ff81)\nbuilt with GNU 12.2.0 for Linux x86_64\n", "0.5.0-dev (build 1, commit de3ff81)"],
    // llama.cpp's log thread may have turned its prefix on by the time the line goes out.
    ["behind the log prefix", "0.00.001.982 I srv  llama_server: initializing ...\n0.00.001.982 I version: 0.5.0-dev (build 1, commit de3ff81)\n", "0.5.0-dev (build 1, commit de3ff81)"],
    ["none", "error: invalid argument: --version\n", undefined],
    ["an empty one", "version: \n", undefined],
  ])("%s", (_, output, version) => {
    expect(parseVersion(output)).toBe(version);
  });
});

describe("offloadDevices", () => {
  it("reads the real binary's list (the section the parser looks for is the one it prints)", async () => {
    const runtime = await detectRuntime();
    const binary = await resolveLlamaServerBinary({ runtime, env: process.env });
    const raw = execFileSync(binary.path, ["--list-devices"], { env: launchEnv(binary.path, process.env), encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    expect(raw).toMatch(/^Available devices:$/m);
    const devices = await offloadDevices(runtime, binary, process.env);
    // This machine's build lists "(none)"; a CUDA build lists CUDA0...
    expect(devices).toEqual(parseListDevices(raw));
    for (const device of devices) expect(device).toMatch(/^\w+: \S/);
  });
});

import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, utimes, writeFile } from "node:fs/promises";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createModelStore } from "../../src/models/index.ts";
import { createLeases } from "../../src/models/store/leases.ts";
import { missingBytes, splitBlob, writeProgress } from "../../src/models/store/parts.ts";
import { acquireLock, sight, tryLock } from "../../src/models/store/lock-file.ts";
import { holderExited, staleReason, thisProcess, type Judge, type Owner, type Sighting } from "../../src/models/store/owner.ts";
import { sha256 } from "../support/registry.ts";
import { commandLine, projectRoot, runtimeBinary, type RuntimeName } from "../support/server-process.ts";
import { until } from "../support/until.ts";

// The cross-process lock and lease files of the store: when a holder is judged gone (a pure rule,
// table-tested), the files themselves on a real folder, with a real process that has exited, and
// a real holder process stopped (SIGSTOP) past the takeover and woken (SIGCONT) afterwards.

const NOW = 1_700_000_000_000;
const HERE = { table: "boot-a/pid:[1]", hostname: "box" };
const judge = (over: Partial<Judge> = {}): Judge => ({ self: HERE, now: NOW, heartbeat: { everyMs: 2_000, staleMs: 30_000 }, alive: () => true, ...over });
const held = (over: Partial<Owner> = {}): Owner => ({ pid: 42, ...HERE, token: "t", ...over });
const seen = (over: Partial<Sighting> = {}): Sighting => ({ owner: held(), mtimeMs: NOW - 1_000, ...over });
const gone = () => false;

describe("staleReason", () => {
  it.each<[string, Sighting, Judge, RegExp | undefined]>([
    ["a fresh lock of a live process here", seen(), judge(), undefined],
    ["a fresh lock whose pid has exited here", seen(), judge({ alive: gone }), /pid 42\) has exited/],
    ["a fresh lock of another process table, on a host of the same name", seen({ owner: held({ table: "boot-b/pid:[1]" }) }), judge({ alive: gone }), undefined],
    ["a fresh lock of another host", seen({ owner: held({ table: "", hostname: "other" }) }), judge({ self: { table: "", hostname: "box" }, alive: gone }), undefined],
    ["a fresh lock whose taker could name neither its table nor its host", seen({ owner: held({ table: "", hostname: "" }) }), judge({ self: { table: "", hostname: "" }, alive: gone }), undefined],
    ["a fresh lock when the OS will not say whether the pid runs", seen(), judge({ alive: () => undefined }), undefined],
    // A host name alone may be shared by containers that do not share pids: the heartbeat must have stopped too.
    ["a lock named by host name only, pid gone here, touched a moment ago", seen({ owner: held({ table: "" }), mtimeMs: NOW - 5_000 }), judge({ alive: gone }), undefined],
    ["a lock named by host name only, pid gone here, three beats missed", seen({ owner: held({ table: "" }), mtimeMs: NOW - 7_000 }), judge({ alive: gone }), /pid 42\) has exited/],
    ["a lock judged by one who cannot read its table, three beats missed", seen({ mtimeMs: NOW - 7_000 }), judge({ self: { table: "", hostname: "box" }, alive: gone }), /pid 42\) has exited/],
    ["a lock untouched for longer than the limit", seen({ mtimeMs: NOW - 31_000 }), judge(), /not touched it for 31 s/],
    ["a lock untouched for just under the limit", seen({ mtimeMs: NOW - 29_000 }), judge(), undefined],
    ["an empty lock (its taker died before writing it), fresh", seen({ owner: undefined }), judge({ alive: gone }), undefined],
    ["an empty lock, old", seen({ owner: undefined, mtimeMs: NOW - 60_000 }), judge(), /not touched it for 60 s/],
    // A clock ahead of ours puts the heartbeat in our future: only watching it tells.
    ["a heartbeat from a clock ahead, watched for less than the limit", seen({ mtimeMs: NOW + 3_600_000 }), judge({ unchangedForMs: 10_000 }), undefined],
    ["a heartbeat from a clock ahead, unmoved for longer than the limit", seen({ mtimeMs: NOW + 3_600_000 }), judge({ unchangedForMs: 31_000 }), /has not moved for 31 s/],
  ])("%s", (_, sighting, how, expected) => {
    const reason = staleReason(sighting, how);
    if (expected) expect(reason).toMatch(expected);
    else expect(reason).toBeUndefined();
  });
});

describe("holderExited", () => {
  // Only a holder surely dead needs no mark when its lock is broken: it can write nothing more.
  it.each<[string, Sighting, Judge, boolean]>([
    ["its pid has exited in our process table", seen(), judge({ alive: gone }), true],
    ["its pid runs", seen(), judge(), false],
    ["the OS will not say", seen(), judge({ alive: () => undefined }), false],
    ["its pid has exited on a host of the same name, its table unknown", seen({ owner: held({ table: "" }), mtimeMs: NOW - 60_000 }), judge({ alive: gone }), false],
    ["it is silent on another machine", seen({ owner: held({ table: "", hostname: "other" }), mtimeMs: NOW - 60_000 }), judge({ alive: gone }), false],
    ["its lock is empty", seen({ owner: undefined, mtimeMs: NOW - 60_000 }), judge({ alive: gone }), false],
  ])("%s", (_, sighting, how, expected) => {
    expect(holderExited(sighting, how)).toBe(expected);
  });
});

/** A pid that has just exited on this machine (its process ran and was reaped). */
function exitedPid(): number {
  const child = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" });
  return Number(child.stdout);
}

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});
const folder = async () => (dir = await mkdtemp(join(tmpdir(), "llamadock-locks-")));

describe("lock files", () => {
  it("go to one taker at a time, and to the next once released", async () => {
    const path = join(await folder(), "x.lock");
    const first = await tryLock(path);
    expect(first).toBeDefined();
    expect(await tryLock(path)).toBeUndefined();
    expect((await sight(path))?.owner).toMatchObject(thisProcess());
    await first!.release();
    const second = await tryLock(path);
    expect(second).toBeDefined();
    await second!.release();
    expect(await readdir(dir!)).toEqual([]);
  });

  it("are broken at once when their holder has exited on this machine", async () => {
    const path = join(await folder(), "x.lock");
    await writeFile(path, JSON.stringify({ ...thisProcess(), pid: exitedPid(), token: "dead" }));
    const lock = await acquireLock(path, { pollMs: 10, signal: AbortSignal.timeout(5_000) });
    expect((await sight(path))?.owner?.pid).toBe(process.pid);
    await lock!.release();
  });

  it("are waited for while a live holder touches them, and taken once it releases", async () => {
    const path = join(await folder(), "x.lock");
    const holder = (await tryLock(path, { everyMs: 20, staleMs: 200 }))!;
    const before = (await stat(path)).mtimeMs;
    let polls = 0;
    const waiting = acquireLock(path, { pollMs: 20, heartbeat: { everyMs: 20, staleMs: 200 }, waiting: async () => (polls++, false) });
    // Three times the limit: a live holder's lock is never judged stale, its heartbeat moves on.
    await until(() => polls >= 30, "the waiter to poll thirty times");
    expect((await stat(path)).mtimeMs).toBeGreaterThan(before);
    expect((await sight(path))?.owner?.pid).toBe(process.pid);
    await holder.release();
    const taken = await waiting;
    expect(taken).toBeDefined();
    await taken!.release();
  });

  it("are broken when untouched past the limit, even when their holder's pid cannot be asked", async () => {
    const path = join(await folder(), "x.lock");
    await writeFile(path, JSON.stringify({ pid: 1, table: "", hostname: "another-machine", token: "far" }));
    const old = new Date(Date.now() - 60_000);
    await utimes(path, old, old);
    const lock = await acquireLock(path, { pollMs: 10, signal: AbortSignal.timeout(5_000) });
    expect((await sight(path))?.owner?.token).not.toBe("far");
    await lock!.release();
  });

  it("are broken once their heartbeat stops moving for the limit, whatever the holder's clock says", async () => {
    const path = join(await folder(), "x.lock");
    await writeFile(path, JSON.stringify({ pid: 1, table: "", hostname: "another-machine", token: "ahead" }));
    const ahead = new Date(Date.now() + 3_600_000);
    await utimes(path, ahead, ahead);
    let polls = 0;
    const lock = await acquireLock(path, { pollMs: 10, heartbeat: { everyMs: 10, staleMs: 300 }, waiting: async () => (polls++, false), signal: AbortSignal.timeout(10_000) });
    expect(polls).toBeGreaterThan(1); // it watched before it broke
    expect((await sight(path))?.owner?.token).not.toBe("ahead");
    await lock!.release();
  });

  it("tell their holder when another process broke them, and are not removed by it then", async () => {
    const path = join(await folder(), "x.lock");
    const held = (await tryLock(path, { everyMs: 20, staleMs: 1_000 }))!;
    // Another process judged us gone and took the lock.
    await writeFile(path, JSON.stringify({ pid: 1, table: "", hostname: "another-machine", token: "theirs" }));
    await until(() => held.lost.aborted, "the holder to see its lock lost");
    expect(String(held.lost.reason)).toMatch(/another process took over/);
    await held.release();
    expect((await sight(path))?.owner?.token).toBe("theirs");
  });

  it("stop the wait when the caller's signal aborts", async () => {
    const path = join(await folder(), "x.lock");
    const holder = (await tryLock(path))!;
    const signal = AbortSignal.timeout(100);
    await expect(acquireLock(path, { pollMs: 10, signal })).rejects.toMatchObject({ name: "TimeoutError" });
    await holder.release();
  });
});

describe("leases", () => {
  const A = `sha256:${"a".repeat(64)}`;
  const B = `sha256:${"b".repeat(64)}`;

  it("show every live holder's blobs to the others, and disappear once released", async () => {
    const root = await folder();
    const mine = createLeases(join(root, "leases"));
    const theirs = createLeases(join(root, "leases"));
    const release = await theirs.hold([A]);
    expect([...(await mine.held())]).toEqual([A]);
    const second = await mine.hold([B]);
    expect([...(await theirs.held())].sort()).toEqual([A, B]);
    release();
    second();
    await until(async () => (await readdir(join(root, "leases"))).length === 0, "the lease files to go");
    expect([...(await mine.held())]).toEqual([]);
  });

  it("of a process that has exited are ignored and removed", async () => {
    const root = await folder();
    const leases = join(root, "leases");
    const mine = createLeases(leases);
    await mkdir(leases);
    await writeFile(join(leases, "1-dead.json"), JSON.stringify({ ...thisProcess(), pid: exitedPid(), token: "dead", digests: [A] }));
    await writeFile(join(leases, "2-far.json"), JSON.stringify({ pid: 1, table: "", hostname: "another-machine", token: "far", digests: [B] }));
    expect([...(await mine.held())]).toEqual([B]);
    expect(await readdir(leases)).toEqual(["2-far.json"]);
    expect(JSON.parse(await readFile(join(leases, "2-far.json"), "utf8")).digests).toEqual([B]);
  });
});

describe("a holder stopped past the takeover, then woken", () => {
  const MiB = 1 << 20;
  const STALE_MS = "1000";
  const children: ChildProcessWithoutNullStreams[] = [];
  const closers: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    for (const close of closers.splice(0)) await close();
  });

  /** A holder process (test/support/stalled-holder.ts) on `root`, its output gathered. */
  function holder(runtime: RuntimeName, root: string, args: string[]) {
    const runtimeArgs = runtime === "deno" ? ["--allow-all"] : [];
    const child = spawn(runtimeBinary(runtime), commandLine({ runtime, entry: "test/support/stalled-holder.ts", args: [root, STALE_MS, ...args], runtimeArgs }), { cwd: projectRoot });
    children.push(child);
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk));
    const exited = once(child, "close").then(([code]) => code as number | null);
    return { child, output: () => output, exited };
  }

  /** Stops the process and waits until the kernel says it is stopped ("T" in /proc). */
  async function stop(child: ChildProcessWithoutNullStreams): Promise<void> {
    child.kill("SIGSTOP");
    await until(async () => (await readFile(`/proc/${child.pid}/stat`, "utf8")).split(") ")[1]!.startsWith("T"), "the holder to stop");
  }

  it.each<RuntimeName>(["node", "bun", "deno"])("never lets its late writes into the blob, and it renames nothing (%s)", async (runtime) => {
    const root = await folder();
    const blob = new Uint8Array(randomBytes(8 * MiB)); // its slices are copies: each moves to the hashing thread
    const digest = sha256(blob);
    // The holder resumes an earlier pull's first mebibyte (it appends to the file); its source
    // sends up to half the blob, then a mebibyte more only once the holder is stopped (it waits
    // in the socket for the holder to wake), then nothing.
    const layout = createModelStore(root).layout;
    await mkdir(layout.blobsDir, { recursive: true });
    await writeFile(layout.incompleteBlob(digest), blob.subarray(0, MiB));
    let answer: ServerResponse | undefined;
    const server = createServer((request, response) => {
      expect(request.headers.range).toBe(`bytes=${MiB}-`);
      response.writeHead(206, { "content-length": String(blob.byteLength - MiB), "content-range": `bytes ${MiB}-${blob.byteLength - 1}/${blob.byteLength}` });
      response.write(blob.subarray(MiB, 4 * MiB));
      answer = response;
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    closers.push(async () => {
      server.closeAllConnections();
      server.close();
    });
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/blob`;
    const old = holder(runtime, root, ["blob", url, digest, String(blob.byteLength)]);
    const onDisk = () => stat(layout.incompleteBlob(digest)).then((s) => s.size, () => 0);
    await until(async () => (await onDisk()) === 4 * MiB, "the holder to write half the blob");
    await stop(old.child);
    answer!.write(blob.subarray(4 * MiB, 5 * MiB));

    // Another process on the store (this one) judges it gone after STALE_MS and takes the blob
    // over, resuming from what it left; its source sends the rest in two halves.
    const taker = createModelStore(root, {}, { lockStaleMs: Number(STALE_MS) });
    closers.push(() => taker.close());
    let sendRest = () => {};
    const rest = new Promise<void>((resolve) => (sendRest = resolve));
    const taken = taker.downloadBlob({
      digest,
      size: blob.byteLength,
      signal: new AbortController().signal,
      source: async (range) => {
        expect(range.start).toBe(4 * MiB);
        const body = new ReadableStream<Uint8Array>({
          start: (controller) => controller.enqueue(blob.slice(range.start, 6 * MiB)),
          pull: async (controller) => {
            await rest;
            controller.enqueue(blob.slice(6 * MiB));
            controller.close();
          },
        });
        return { body, start: range.start, ranged: true };
      },
    });
    await until(async () => (await sight(layout.blobLock(digest)))?.owner?.pid === process.pid && (await onDisk()) >= 6 * MiB, "the taker to write its first half");

    // The stopped holder wakes in the middle of the takeover, with a mebibyte to write.
    old.child.kill("SIGCONT");
    expect(await old.exited).toBe(1);
    expect(old.output()).toMatch(/^error: another process took over the store.s lock on .*\.lock, judging this one gone/m);
    expect(old.output()).not.toMatch(/^done$/m);
    sendRest();
    await taken;

    const stored = await readFile(layout.blob(digest));
    expect(stored.byteLength).toBe(blob.byteLength);
    expect(sha256(stored)).toBe(digest);
    // Nothing else is left: no partial file, no copy aside, no lock or mark of the takeover.
    expect(await readdir(layout.blobsDir)).toEqual([digest.slice("sha256:".length)]);
  }, 60_000);

  it("leaves a parted download to the taker in a fresh file, every recorded part kept", async () => {
    const root = await folder();
    const layout = createModelStore(root).layout;
    const blob = new Uint8Array(randomBytes(4 * MiB));
    const digest = sha256(blob);
    const settings = { streams: 4, minBytes: 256 << 10 };
    // What a holder judged gone left: its file, two parts written (one whole, one half), their
    // record, and its lock, untouched for a minute by a process on another machine.
    const parts = splitBlob(blob.byteLength, settings)!;
    parts[0]!.done = parts[0]!.end - parts[0]!.start;
    parts[2]!.done = (parts[2]!.end - parts[2]!.start) / 2;
    const partial = new Uint8Array(blob.byteLength);
    for (const p of parts) partial.set(blob.subarray(p.start, p.start + p.done), p.start);
    await mkdir(layout.blobsDir, { recursive: true });
    await writeFile(layout.incompleteBlob(digest), partial);
    await writeProgress(layout.blobProgress(digest), blob.byteLength, parts);
    const left = (await stat(layout.incompleteBlob(digest))).ino;
    await writeFile(layout.blobLock(digest), JSON.stringify({ pid: 1, table: "", hostname: "another-machine", token: "far" }));
    const old = new Date(Date.now() - 60_000);
    await utimes(layout.blobLock(digest), old, old);

    const asked: number[] = [];
    await createModelStore(root).downloadBlob({
      digest,
      size: blob.byteLength,
      parts: settings,
      signal: new AbortController().signal,
      source: async (range) => {
        const end = range.end ?? blob.byteLength;
        asked.push(end - range.start);
        return { body: new Blob([blob.slice(range.start, end)]).stream(), start: range.start, ranged: true };
      },
    });
    expect(sha256(await readFile(layout.blob(digest)))).toBe(digest);
    // Only what the record lacked was asked for, and the blob is not the file the gone holder had open.
    expect(asked.reduce((a, b) => a + b, 0)).toBe(missingBytes(parts));
    expect((await stat(layout.blob(digest))).ino).not.toBe(left);
    expect(await readdir(layout.blobsDir)).toEqual([digest.slice("sha256:".length)]);
  });

  it("refuses its late change of the index, which keeps the change made meanwhile", async () => {
    const root = await folder();
    const old = holder("node", root, ["index", "stale/model:latest"]);
    await until(() => old.output().includes("changing\n"), "the holder to read the index under its lock");
    await stop(old.child);

    const taker = createModelStore(root, {}, { lockStaleMs: Number(STALE_MS) });
    closers.push(() => taker.close());
    const weights = new TextEncoder().encode("the taker's weights");
    const gguf = await taker.putBlob(weights);
    await taker.add({ manifest: new TextEncoder().encode("taker"), tag: "taker/model:latest", created: 1, config: {}, files: { gguf: [gguf] } });

    old.child.kill("SIGCONT");
    old.child.stdin.write("write now\n");
    expect(await old.exited).toBe(1);
    expect(old.output()).toMatch(/^error: another process took over the store.s lock on .*\.lock, judging this one gone/m);
    expect((await taker.list()).map((m) => m.tags)).toEqual([["taker/model:latest"]]);
    // The refused change left no temporary file, and the takeover no mark.
    expect((await readdir(root)).filter((n) => n !== "leases").sort()).toEqual(["blobs", "manifests", "models.json"]);
  }, 60_000);
});

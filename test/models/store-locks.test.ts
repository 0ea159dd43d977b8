import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createLeases } from "../../src/models/store/leases.ts";
import { acquireLock, sight, tryLock } from "../../src/models/store/lock-file.ts";
import { staleReason, thisProcess, type Judge, type Owner, type Sighting } from "../../src/models/store/owner.ts";
import { until } from "../support/until.ts";

// The cross-process lock and lease files of the store: when a holder is judged gone (a pure rule,
// table-tested), and the files themselves on a real folder, with a real process that has exited.

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

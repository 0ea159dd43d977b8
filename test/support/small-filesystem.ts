import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

// A real filesystem of a few bytes, for tests of a full disk: a tmpfs of `bytes` mounted in a
// mount namespace of its own, which a helper process (`unshare`, then `sleep`) holds. Nothing is
// mounted on the machine, and nothing stays mounted when the helper goes, however the test ends;
// this process reaches the filesystem through /proc/<helper>/root, and a process it starts may run
// in the namespace (`enter`) and see it at `inside` (Deno asks for every permission for a path
// under /proc). As root the namespace is a mount namespace alone; as anyone else it is also a user
// namespace (in which an unprivileged user may mount a tmpfs), so the tests run on a developer's
// machine and in CI.

export type SmallFilesystem = {
  /** The filesystem's root, as a path every process on the machine can open. */
  path: string;
  /** Its root as a process run with `enter` sees it. */
  inside: string;
  /** A command prefix that runs a command in the namespace (`nsenter`), in the folder `cwd`. */
  enter(cwd: string): string[];
  close(): Promise<void>;
};

/** Mounts it, or answers why it cannot be mounted here (no `unshare`, namespaces refused). */
async function tryMount(bytes: number, unshareArgs: string[]): Promise<SmallFilesystem | string> {
  const dir = await mkdtemp(join(tmpdir(), "llamadock-small-fs-"));
  const script = `mount -t tmpfs -o size=${bytes} tmpfs "$0" && echo mounted && exec sleep 100000`;
  let helper: ReturnType<typeof spawn>;
  try {
    helper = spawn("unshare", [...unshareArgs, "sh", "-c", script, dir], { stdio: ["ignore", "pipe", "pipe"] });
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    return `unshare: ${(error as Error).message}`; // a runtime that throws where Node emits "error"
  }
  let output = "";
  helper.stdout!.on("data", (chunk: Buffer) => (output += chunk));
  helper.stderr!.on("data", (chunk: Buffer) => (output += chunk));
  const exited = once(helper, "close");
  const mounted = new Promise<boolean>((resolve) => {
    helper.stdout!.on("data", () => output.includes("mounted\n") && resolve(true));
    void exited.then(() => resolve(false));
    helper.on("error", () => resolve(false));
  });
  if (!(await mounted)) {
    await rm(dir, { recursive: true, force: true });
    return `unshare ${unshareArgs.join(" ")}: ${output.trim() || "could not run"}`;
  }
  return {
    path: `/proc/${helper.pid}/root${dir}`,
    inside: dir,
    enter: (cwd) => ["nsenter", `--target=${helper.pid}`, ...(unshareArgs.includes("--user") ? ["--user", "--preserve-credentials"] : []), "--mount", `--wd=${cwd}`],
    async close() {
      helper.kill("SIGKILL");
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A tmpfs of `bytes`. Where none can be mounted, a test that needs it skips with the reason, but
 * fails under CI=true: CI must run it.
 */
export async function smallFilesystem(bytes: number, skip: (why: string) => never): Promise<SmallFilesystem> {
  const attempts = process.getuid?.() === 0 ? [["--mount"], ["--user", "--map-root-user", "--mount"]] : [["--user", "--map-root-user", "--mount"]];
  const refusals: string[] = [];
  for (const args of attempts) {
    const mounted = await tryMount(bytes, [...args, "--propagation", "private"]);
    if (typeof mounted !== "string") return mounted;
    refusals.push(mounted);
  }
  const why = `no size-capped filesystem can be mounted here (${refusals.join("; ")})`;
  if (process.env.CI === "true") throw new Error(`${why}: CI must run this test`);
  return skip(why);
}

import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// Vitest's global setup: fails the run when its tests leave temporary folders or files behind.
//
// The run gets a temporary folder of its own, made here and handed down as TMPDIR: the test
// workers start after this with this process's environment, and so does every process they start,
// so os.tmpdir() and `mktemp` in all of them answer this folder. What is left in it at the end was
// made by this run, never by another run or program on the machine making its own meanwhile. Tests
// name their scratch `llamadock-…`: those left fail the run, listed. Other programs' leftovers
// there (a runtime's or a tool's own) are not ours to judge. The folder goes either way, so
// nothing piles up in the system's temporary folder, even from a run that fails.

/** How the project's temporary folders and files are named. */
export const TEMP_PREFIX = "llamadock-";

/** The run's temporary folder, as TMPDIR; the returned teardown throws, naming what tests left there. */
export default function guardTemporaryFolder(): () => void {
  const before = process.env.TMPDIR;
  const folder = mkdtempSync(join(tmpdir(), `${TEMP_PREFIX}run-`));
  process.env.TMPDIR = folder;
  // An interrupted run (Ctrl-C, SIGTERM) exits without the teardown: its folder goes on the way out.
  const remove = () => rmSync(folder, { recursive: true, force: true, maxRetries: 3 });
  process.once("exit", remove);
  return () => {
    process.off("exit", remove);
    if (before === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = before;
    const left = readdirSync(folder).filter((name) => name.startsWith(TEMP_PREFIX)).sort();
    remove();
    if (left.length > 0) {
      throw new Error(`tests left ${left.length} temporary ${left.length === 1 ? "entry" : "entries"} behind (each test removes what it makes, in afterEach or afterAll):\n  ${left.join("\n  ")}`);
    }
  };
}

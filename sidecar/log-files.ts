import { readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";

// The log folder holds one log per runner, `<name>.log` (and what rolled over, `<name>.log.1`).
// Every load writes a new one, so it is bounded by count: as a runner starts, the logs written to
// longest ago go, down to `keep` with the new one; a live runner's log never goes, however old.

export const DEFAULT_LOGS_KEPT = 20;

/** Removes the oldest logs past `keep` (counting the one about to be written), sparing `live` runners'. */
export async function pruneLogs(logDir: string, keep: number, live: ReadonlySet<string>): Promise<void> {
  const names = (await readdir(logDir).catch(() => [] as string[])).filter((name) => name.endsWith(".log"));
  const excess = names.length + 1 - keep;
  if (excess <= 0) return;
  const lastWritten = async (name: string) => (await stat(join(logDir, name)).catch(() => undefined))?.mtimeMs ?? 0;
  const dated = await Promise.all(names.filter((name) => !live.has(name.slice(0, -".log".length))).map(async (name) => ({ name, at: await lastWritten(name) })));
  const oldest = dated.sort((a, b) => a.at - b.at).slice(0, excess);
  // A log that cannot be removed stays: a full folder must not keep a runner from starting.
  await Promise.all(oldest.flatMap(({ name }) => [name, `${name}.1`].map((file) => rm(join(logDir, file), { force: true }).catch(() => {}))));
}

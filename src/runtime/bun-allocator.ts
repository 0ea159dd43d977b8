// How our launchers start Bun's allocator (mimalloc). By default it hands a page that fell free
// back to the system 100 ms later (a purge); a server that makes and drops the same objects on every
// request then faults those pages in again all the time, and pays a scavenger thread to purge them.
// Measured under bench:inference (Bun, 16 completions in flight): 45–120 µs of CPU less per whole
// completion and 47–56 µs per stream with purging off, the page faults gone (0.6–2.6 a request to
// under 0.2). The price: memory once used stays with the process for reuse (an inference load's RSS
// 125 MiB instead of 109; after a 1 GiB upload, 215 MiB instead of 104).
// mimalloc reads its options as the process starts and exports no call to change them later, so
// this is the environment every launcher gives Bun: `npm start`, bin/llamadock, the image's ENV,
// and the tests' servers (test/support/server-process.ts). A value set by the user wins.

/** The variables, and their values, our launchers start Bun with unless already set. */
export const BUN_ALLOCATOR_ENV: Readonly<Record<string, string>> = { MIMALLOC_PURGE_DELAY: "-1" };

/** Those of BUN_ALLOCATOR_ENV that `env` does not set already. */
export const bunAllocatorDefaults = (env: Record<string, string | undefined>): Record<string, string> =>
  Object.fromEntries(Object.entries(BUN_ALLOCATOR_ENV).filter(([name]) => env[name] === undefined));

/**
 * A line for the log when our server runs under Bun without them (started by hand: `bun run
 * src/index.ts`). Elsewhere the environment is not read: Deno may be allowed only the variables
 * the server reads, and refuses any other.
 */
export function allocatorAdvice(runtime: string, env: Record<string, string | undefined>): string | undefined {
  if (runtime !== "bun") return undefined;
  const missing = Object.keys(bunAllocatorDefaults(env));
  if (missing.length === 0) return undefined;
  return `note: Bun's allocator hands freed memory back to the system here, which costs CPU on every request under load; npm start sets ${missing.map((name) => `${name}=${BUN_ALLOCATOR_ENV[name]}`).join(" ")} (docs/deployment.md)`;
}

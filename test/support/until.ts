/** Polls `check` every 25 ms until it holds; no wall-time assertion, just a bound on waiting. */
export async function until(check: () => boolean | Promise<boolean>, what: string, tries = 1200): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

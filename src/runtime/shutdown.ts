/**
 * Calls `fn` for the first of SIGINT and SIGTERM only: a second Ctrl-C, or a SIGTERM that follows
 * one, must not start a second shutdown while the first drains. `listen` is the runtime's way
 * of subscribing to a signal.
 */
export function onFirstShutdownSignal(
  listen: (signal: "SIGINT" | "SIGTERM", handler: () => void) => void,
  fn: (signal: string) => void,
): void {
  let fired = false;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    listen(signal, () => {
      if (fired) return;
      fired = true;
      fn(signal);
    });
  }
}

// The runners' figures for /metrics (each runner's /metrics and /slots: two requests per runner),
// read at most once per period however often, and by however many, /metrics is scraped: it is an
// open path (no API key), and a tight scrape loop would otherwise keep every runner answering.

/** How long one reading of the runners' figures serves every scrape. */
export const RUNNER_FIGURES_MS = 1_000;

/** `read`, whose result (or reading in progress) is shared for `ms` from its start; a failed one is not kept. */
export function sharedFor<T>(ms: number, read: () => Promise<T>, now: () => number = performance.now.bind(performance)): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    const at = now();
    if (last && at - last.at < ms) return last.value;
    const value = read();
    const reading = { at, value };
    last = reading;
    value.catch(() => {
      if (last === reading) last = undefined;
    });
    return value;
  };
}

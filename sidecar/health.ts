// Readiness: llama-server listens before its model is loaded and answers 503 until then, so the
// supervisor polls GET /health until 200. The interval starts tiny and grows, so a small model is
// seen ready within milliseconds while a large one that loads for minutes costs few requests.

const FIRST_INTERVAL_MS = 2;
const MAX_INTERVAL_MS = 50;
const GROWTH = 1.5;

async function isHealthy(fetchRunner: typeof fetch, signal: AbortSignal): Promise<boolean> {
  try {
    const response = await fetchRunner("http://runner/health", { signal });
    await response.body?.cancel();
    return response.status === 200;
  } catch {
    return false; // no socket yet, or refused: not ready
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

/** Resolves true once /health answers 200, or false as soon as `signal` aborts. */
export async function pollUntilHealthy(fetchRunner: typeof fetch, signal: AbortSignal): Promise<boolean> {
  let interval = FIRST_INTERVAL_MS;
  while (!signal.aborted) {
    if (await isHealthy(fetchRunner, signal)) return true;
    await sleep(interval, signal);
    interval = Math.min(interval * GROWTH, MAX_INTERVAL_MS);
  }
  return false;
}

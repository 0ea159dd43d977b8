import type { PullEvent } from "./plan.ts";

// Progress lines in Docker Model Runner's shape, at most one every 100 ms per layer (and always
// the line that completes a layer), with the running total of downloaded megabytes.

export const PROGRESS_INTERVAL_MS = 100;

export function progressReporter(total: number, emit: (event: PullEvent) => void, now: () => number = Date.now) {
  const current = new Map<string, number>();
  const lastSent = new Map<string, number>();
  return (layer: { digest: string; size: number }, bytes: number, complete = false) => {
    current.set(layer.digest, bytes);
    const time = now();
    const previous = lastSent.get(layer.digest);
    if (!complete && previous !== undefined && time - previous < PROGRESS_INTERVAL_MS) return;
    if (complete && lastSent.get(layer.digest) === Infinity) return;
    lastSent.set(layer.digest, complete ? Infinity : time);
    const downloaded = [...current.values()].reduce((sum, n) => sum + n, 0);
    emit({
      type: "progress",
      message: `Downloaded: ${(downloaded / 1_000_000).toFixed(2)} MB`,
      total,
      layer: { id: layer.digest, size: layer.size, current: bytes },
      mode: "pull",
    });
  };
}

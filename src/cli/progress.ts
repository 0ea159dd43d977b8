import { MultiBar, Presets, type SingleBar } from "cli-progress";
import { formatBytes, formatDuration, shortId } from "./format.ts";

// How a pull's progress is shown: one bar per layer (bytes, speed, ETA) on a terminal; plain
// lines elsewhere (a log, a pipe, an init container), at most one per layer per second.

export type LayerProgress = { id: string; size: number; current: number };

export interface ProgressView {
  layer(progress: LayerProgress): void;
  /** A line for people beside the bars (a warning). */
  note(text: string): void;
  /** Ends the display (bars stop redrawing); then a message may be printed. */
  stop(): void;
}

/** Bytes per second over the last few seconds of a layer's progress. */
function speedometer(windowMs = 3000) {
  const samples: [number, number][] = [];
  return (bytes: number, now: number) => {
    samples.push([now, bytes]);
    while (samples.length > 2 && now - samples[0]![0] > windowMs) samples.shift();
    const [t0, b0] = samples[0]!;
    return now > t0 ? ((bytes - b0) * 1000) / (now - t0) : 0;
  };
}

export function barsView(stream: NodeJS.WriteStream): ProgressView {
  const multibar = new MultiBar(
    {
      stream,
      // Fits 80 columns: cli-progress cuts a line at the terminal's width.
      format: "{layer} [{bar}] {percentage}% {done}/{size} {speed} ETA {timeLeft}",
      barsize: 12,
      hideCursor: true,
      clearOnComplete: false,
      autopadding: true,
      fps: 10,
    },
    Presets.shades_classic,
  );
  const bars = new Map<string, { bar: SingleBar; speed: ReturnType<typeof speedometer> }>();
  return {
    layer({ id, size, current }) {
      let entry = bars.get(id);
      if (!entry) {
        entry = { bar: multibar.create(size, 0, payload(id, size, 0, 0)), speed: speedometer() };
        bars.set(id, entry);
      }
      const rate = entry.speed(current, Date.now());
      entry.bar.update(current, payload(id, size, current, rate));
    },
    note: (text) => multibar.log(`${text}\n`),
    stop: () => multibar.stop(),
  };
}

function payload(id: string, size: number, current: number, rate: number) {
  const left = size - current;
  return {
    layer: shortId(id),
    done: formatBytes(current),
    size: formatBytes(size),
    speed: `${formatBytes(Math.round(rate))}/s`,
    timeLeft: left === 0 ? "0s" : rate > 0 ? formatDuration((left / rate) * 1000) : "-",
  };
}

export function linesView(write: (line: string) => void, now: () => number = Date.now): ProgressView {
  const last = new Map<string, number>();
  return {
    layer({ id, size, current }) {
      const complete = current >= size;
      const previous = last.get(id);
      if (previous === Infinity) return;
      if (!complete && previous !== undefined && now() - previous < 1000) return;
      last.set(id, complete ? Infinity : now());
      const percent = size > 0 ? Math.floor((current * 100) / size) : 100;
      write(`${shortId(id)}: ${formatBytes(current)} / ${formatBytes(size)} (${percent}%)${complete ? " done" : ""}`);
    },
    note: write,
    stop() {},
  };
}

/** Bars on a terminal, plain lines elsewhere: every command that shows a transfer's progress. */
export const progressView = (): ProgressView => (process.stdout.isTTY ? barsView(process.stdout) : linesView((line) => process.stdout.write(`${line}\n`)));

import { pushStream } from "../../http/stream.ts";
import type { PullEvent } from "./plan.ts";
import type { PullJob } from "./puller.ts";

// A pull job's progress as NDJSON, in the client's shape: Docker Model Runner's (`/models/create`,
// each event as it is) or Ollama's (`/api/pull`, its status lines). One stream for both, so both
// end alike: the job's end closes it, and the client's departure stops listening (the last
// listener gone cancels the pull).

export type ProgressShape = {
  /** Lines sent before any event. */
  first?: object[];
  /** An event's lines. */
  lines(event: PullEvent): object[];
};

export const DMR_SHAPE: ProgressShape = { lines: (event) => [event] };

/** `presence` aborts when the client leaves (its request's signal). */
export function progressStream(job: PullJob, presence: AbortSignal, shape: ProgressShape = DMR_SHAPE): ReadableStream<Uint8Array> {
  return pushStream(
    (out) => {
      const send = (line: object) => out.send(`${JSON.stringify(line)}\n`);
      shape.first?.forEach(send);
      const unlisten = job.listen((event) => shape.lines(event).forEach(send));
      out.over.addEventListener("abort", unlisten, { once: true });
      // `done` never rejects (a failed pull ends with an `error` event); `fail` is there should that change.
      job.done.then(out.end, out.fail);
    },
    { until: presence },
  );
}

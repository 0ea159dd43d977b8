import { idleClock, type BodyDeadline } from "./body-deadline.ts";

// A request body under Bun, read under the idle deadline (body-deadline.ts). Bun reads the socket
// natively and tells JavaScript nothing of bytes nobody asked for, so the body is watched where it
// is read: every way of reading it (the stream, or whole) goes through one stream that a reader
// pulls, and the clock runs only while a pull waits.

export type BodyEvents = {
  /** The first read began: the body is watched from here. */
  reading(): void;
  /** The body stopped arriving: its read fails with the deadline's error. */
  stalled(): void;
};

const nativeBody = Object.getOwnPropertyDescriptor(Request.prototype, "body")!.get!;

/** Makes `request`'s body, however it is read, fail its read once silent for the deadline. */
export function watchBody(request: Request, deadline: BodyDeadline, events: BodyEvents): void {
  let body: ReadableStream<Uint8Array> | undefined;
  let used = false;
  const reading = () => ((used = true), events.reading());
  const stream = () => (body ??= watched(nativeBody.call(request) as ReadableStream<Uint8Array>, deadline, { reading, stalled: events.stalled }));
  // Read whole through a Response, which reads the stream as any reader would.
  const contentType = request.headers.get("content-type");
  const whole = () => new Response(stream(), contentType === null ? undefined : { headers: { "content-type": contentType } });
  Object.defineProperties(request, {
    body: { get: stream },
    bodyUsed: { get: () => used },
    arrayBuffer: { value: () => whole().arrayBuffer() },
    bytes: { value: () => whole().bytes() },
    text: { value: () => whole().text() },
    json: { value: () => whole().json() },
    blob: { value: () => whole().blob() },
    formData: { value: () => whole().formData() },
  });
}

function watched(source: ReadableStream<Uint8Array>, deadline: BodyDeadline, events: BodyEvents): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  let stalled = false;
  let first = true;
  let clock: ReturnType<typeof idleClock>;
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        clock = idleClock(deadline.idleMs, () => {
          stalled = true;
          events.stalled();
          const error = deadline.stalled(deadline.idleMs);
          controller.error(error);
          reader.cancel(error).catch(() => {});
        });
      },
      async pull(controller) {
        if (first) {
          first = false;
          events.reading();
        }
        clock.wait();
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (error) {
          clock.stop();
          throw error; // the client left: the reader gets why
        }
        if (stalled) return;
        if (chunk.done) {
          clock.stop();
          controller.close();
        } else {
          clock.hold(); // until the reader asks again
          controller.enqueue(chunk.value);
        }
      },
      cancel(reason) {
        clock.stop();
        return reader.cancel(reason);
      },
    },
    // Pulled only when a read waits: the clock measures the client's silence, not our pauses.
    { highWaterMark: 0 },
  );
}

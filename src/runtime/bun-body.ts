import { idleClock, type BodyDeadline } from "./body-deadline.ts";

// A request body under Bun, under the idle deadline (body-deadline.ts). Bun reads the socket
// natively and tells JavaScript nothing of the bytes, so a body is watched where it is read:
// through one stream that its reader pulls, the clock running only while a pull waits.
// Reading a body through a JavaScript stream cost Bun about 10 µs of CPU more per request than its
// native whole read, and halved the requests per second of a bare JSON route (measured here): a
// small body read whole (an inference request, arrived with its headers) is read natively, Bun's
// own idle timer guarding it meanwhile (it closes the connection of one that stops, with no answer).

export type BodyEvents = {
  /** Bun's own timer is not needed any more: the body is read whole, or watched by our clock. */
  released(): void;
  /** The body stopped arriving: its read fails with the deadline's error. */
  stalled(): void;
};

/** Up to this, a body with a declared length read whole is read natively (it comes in a packet or a few). */
const NATIVE_UP_TO = 64 * 1024;

const nativeBody = Object.getOwnPropertyDescriptor(Request.prototype, "body")!.get!;
const WHOLE = ["arrayBuffer", "bytes", "text", "json", "blob", "formData"] as const;

/** Makes `request`'s body fail its read once silent for the deadline, however it is read. */
export function watchBody(request: Request, deadline: BodyDeadline, events: BodyEvents): void {
  let body: ReadableStream<Uint8Array> | undefined;
  let used = false;
  const stream = () => (body ??= watched(nativeBody.call(request) as ReadableStream<Uint8Array>, deadline, events, () => (used = true)));
  const declared = Number(request.headers.get("content-length") ?? NaN);
  const properties: PropertyDescriptorMap = { body: { get: stream } };
  if (declared <= NATIVE_UP_TO) {
    for (const name of WHOLE) {
      const read = Request.prototype[name] as (this: Request) => Promise<unknown>;
      properties[name] = { value: () => read.call(request).finally(events.released) };
    }
  } else {
    properties.bodyUsed = { get: () => used };
    // Read whole through a Response, which reads the stream as any reader would.
    const contentType = request.headers.get("content-type");
    const whole = () => new Response(stream(), contentType === null ? undefined : { headers: { "content-type": contentType } });
    for (const name of WHOLE) properties[name] = { value: () => whole()[name]() };
  }
  Object.defineProperties(request, properties);
}

function watched(source: ReadableStream<Uint8Array>, deadline: BodyDeadline, events: BodyEvents, pulled: () => void): ReadableStream<Uint8Array> {
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
          pulled();
          events.released();
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

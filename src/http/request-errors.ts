// Errors of our own making while serving a request: a bug, never a refusal (those are HttpErrors,
// answered in the envelope). Each is logged loudly, with its stack and the request it belongs to
// (method, path, an id the client is told too), and counted for /metrics; the server keeps
// serving. A request's work must never take the process down, and never vanish either: the router
// reports what a handler throws, and a stream's producer reports what fails once its answer has
// begun (see pushStream). Nothing else catches: an error thrown outside a request is not ours to hide.

/** Reports `error` as a failure of `request`; returns the request's id, as the log line shows it. */
export type ReportError = (error: unknown, request: Request) => string;

/** An id a client sent (`X-Request-Id`), when it is a short plain token; else one of ours. */
const CLIENT_ID = /^[\w.:-]{1,64}$/;

/** The reporter: each report is logged and `counted` (the metrics' counter). */
export function requestErrorReporter(counted: () => void, log: (line: string) => void = console.error): ReportError {
  // One id per request, however many of its parts fail.
  const ids = new WeakMap<Request, string>();
  const idOf = (request: Request) => {
    let id = ids.get(request);
    if (id === undefined) {
      const given = request.headers.get("x-request-id") ?? "";
      id = CLIENT_ID.test(given) ? given : crypto.randomUUID().slice(0, 8);
      ids.set(request, id);
    }
    return id;
  };
  return (error, request) => {
    counted();
    const id = idOf(request);
    const path = new URL(request.url).pathname;
    const detail = error instanceof Error ? (error.stack ?? `${error.name}: ${error.message}`) : String(error);
    log(`request error (id ${id}) ${request.method} ${path}: ${detail}`);
    return id;
  };
}

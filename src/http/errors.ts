import type { ReportError } from "./request-errors.ts";

// One error type for every failure we answer, rendered in the OpenAI envelope
// {"error":{"message","type","code"}}: clients written for OpenAI parse it, and so can people.

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "method_not_allowed_error"
  | "conflict_error"
  | "payload_too_large_error"
  | "unprocessable_entity_error"
  | "upstream_error"
  | "timeout_error"
  | "unavailable_error"
  | "rate_limit_error"
  | "server_error";

export class HttpError extends Error {
  readonly status: number;
  readonly type: ErrorType;
  readonly code: string;
  readonly headers: Record<string, string>;

  constructor(
    status: number,
    type: ErrorType,
    code: string,
    message: string,
    headers: Record<string, string> = {},
  ) {
    super(message);
    this.status = status;
    this.type = type;
    this.code = code;
    this.headers = headers;
  }

  toResponse(): Response {
    return errorResponse(this.status, this.type, this.code, this.message, this.headers);
  }
}

export function errorResponse(
  status: number,
  type: ErrorType,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): Response {
  return Response.json(
    { error: { message, type, code } },
    { status, headers: { ...headers, "content-type": "application/json" } },
  );
}

export const badRequest = (code: string, message: string) =>
  new HttpError(400, "invalid_request_error", code, message);

export const notFound = (message = "Not found") =>
  new HttpError(404, "not_found_error", "not_found", message);

export const methodNotAllowed = (allow: string[]) =>
  new HttpError(405, "method_not_allowed_error", "method_not_allowed", "Method not allowed", {
    allow: allow.join(", "),
  });

/** The client left before its answer: nobody reads this, but the status tells the logs. */
export const clientGone = (message = "client closed the request") =>
  new HttpError(499, "invalid_request_error", "client_closed_request", message);

/** A request beyond the cap on requests in flight (HTTP_MAX_CONNECTIONS), where the runtime answers one. */
export const overloaded = (max: number) =>
  errorResponse(503, "unavailable_error", "too_many_connections", `more than ${max} requests at once`, { "retry-after": "1" });

/**
 * Renders anything thrown by a handler; an unexpected error is a 500 that names no internals. Given
 * its request and where to report it, it is logged with the request and the 500 names the request's
 * id, which the log line carries too.
 */
export function renderError(error: unknown, request?: Request, report?: ReportError): Response {
  if (error instanceof HttpError) return error.toResponse();
  if (!request || !report) {
    console.error("unhandled error:", error);
    return errorResponse(500, "server_error", "internal_error", "Internal server error");
  }
  const id = report(error, request);
  return errorResponse(500, "server_error", "internal_error", `Internal server error (request ${id}; the server's log tells more)`, { "x-request-id": id });
}

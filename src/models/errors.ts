import { HttpError } from "../http/errors.ts";

// The errors of model management, each with the status Docker Model Runner gives it. The registry
// client and the Hub client turn their upstream answers into these; handlers only throw them.

export const modelNotFound = (reference: string) =>
  new HttpError(404, "not_found_error", "model_not_found", `model not found: ${reference}`);

export const notInRegistry = (message: string) => new HttpError(404, "not_found_error", "model_not_found", message);

export const unauthorized = (message: string) => new HttpError(401, "authentication_error", "unauthorized", message);

/** The registry knew who we were and refused anyway (a push to a repository the credentials may only read). */
export const forbidden = (message: string) => new HttpError(403, "permission_error", "forbidden", message);

export const unsupportedArtifact = (message: string) =>
  new HttpError(422, "unprocessable_entity_error", "unsupported_artifact", message);

export const conflict = (message: string) => new HttpError(409, "conflict_error", "conflict", message);

// 502: the registry or the Hub failed us (a gateway answer), not our server.
export const upstreamFailure = (message: string) => new HttpError(502, "upstream_error", "pull_failed", message);

export const insufficientStorage = (message: string) => new HttpError(507, "server_error", "insufficient_storage", message);

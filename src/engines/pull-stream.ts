import { HttpError } from "../http/errors.ts";
import { pushStream } from "../http/stream.ts";
import type { PullEvent } from "../models/pull/plan.ts";
import type { PullWatch } from "./pull.ts";
import type { EngineRecord } from "./store.ts";

// An engine pull as its callers follow it: the record it ends with, and its progress lines in the
// models' NDJSON shape (DMR's), for every caller of a joined pull, one that joins late included.

export type EnginePull = {
  record: Promise<EngineRecord>;
  /** Resolves once the layers start downloading; a pull refused before (404, 507...) never does (`record` rejects). */
  started: Promise<void>;
  /** Sends each layer's latest line so far, then the lines to come; returns the function that stops. */
  listen(listener: (event: PullEvent) => void): () => void;
};

/** Runs `pull` with a watch that keeps its listeners told. */
export function watchedPull(pull: (watch: PullWatch) => Promise<EngineRecord>): EnginePull {
  const listeners = new Set<(event: PullEvent) => void>();
  const latest = new Map<string, PullEvent>();
  let start = () => {};
  const started = new Promise<void>((resolve) => (start = resolve));
  const watch: PullWatch = {
    started: start,
    progress(event) {
      if (event.layer) latest.set(event.layer.id, event);
      for (const listener of listeners) listener(event);
    },
  };
  return {
    record: pull(watch),
    started,
    listen(listener) {
      for (const event of latest.values()) listener(event);
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

/** Whether the client asked for the progress (`?stream=true`, or NDJSON accepted): else the answer comes whole, as before. */
export const wantsProgress = (request: Request) =>
  new URL(request.url).searchParams.get("stream") === "true" || (request.headers.get("accept") ?? "").includes("application/x-ndjson");

const NDJSON = { "content-type": "application/x-ndjson", "cache-control": "no-cache" };

/**
 * The pull's answer: `answer`'s JSON whole, or (the client asked) its progress lines, then a
 * `success` line carrying `answer`'s fields or an `error` line. Refusals found before a byte is
 * downloaded keep their status and JSON body either way; `presence` aborts when the client leaves.
 */
export async function pullAnswer(request: Request, pull: EnginePull, answer: (record: EngineRecord) => Promise<object>, status: number): Promise<Response> {
  if (!wantsProgress(request)) return Response.json(await answer(await pull.record), { status });
  await Promise.race([pull.started, pull.record]);
  const body = pushStream(
    (out) => {
      const send = (line: object) => out.send(`${JSON.stringify(line)}\n`);
      const unlisten = pull.listen(send);
      out.over.addEventListener("abort", unlisten, { once: true });
      pull.record
        .then(answer)
        .then(
          (fields) => send({ type: "success", message: "Engine pulled successfully", mode: "pull", ...fields }),
          (error: Error) => send(errorLine(error)),
        )
        .then(out.end, out.fail);
    },
    { until: request.signal },
  );
  return new Response(body, { status, headers: NDJSON });
}

/** An answer that pulled nothing (the builtin build named), as one `success` line when progress was asked for. */
export function doneAnswer(request: Request, fields: object): Response {
  if (!wantsProgress(request)) return Response.json(fields);
  return new Response(`${JSON.stringify({ type: "success", message: "Nothing to pull", mode: "pull", ...fields })}\n`, { headers: NDJSON });
}

/** The models' error line, with the OpenAI-shaped error the JSON answer would have carried (naming no internals). */
function errorLine(error: Error): object {
  if (!(error instanceof HttpError)) console.error("engine pull failed:", error);
  const http = error instanceof HttpError ? error : new HttpError(500, "server_error", "internal_error", "Internal server error (the server's log tells more)");
  return { type: "error", message: http.message, mode: "pull", error: { message: http.message, type: http.type, code: http.code } };
}

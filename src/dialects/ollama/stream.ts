import { sseSplitter } from "../../http/sse.ts";
import { finalLine, newStreamState, streamLine, type Clock, type OpenAIAnswer } from "./translate.ts";

// llama-server's SSE stream as Ollama's NDJSON, event by event as they arrive: each `data:` event
// is parsed once and becomes at most one line; nothing is held back but a partial event.

export const ollamaError = (status: number, message: string, headers: Record<string, string> = {}) =>
  Response.json({ error: message }, { status, headers });

export const ndjson = (body: ReadableStream<Uint8Array>) =>
  new Response(body, { headers: { "content-type": "application/x-ndjson", "cache-control": "no-cache" } });

export function toNdjson(kind: "chat" | "generate", model: string, clock: () => Clock): TransformStream<Uint8Array, Uint8Array> {
  const split = sseSplitter();
  const encoder = new TextEncoder();
  const state = newStreamState();
  let ended = false;
  const line = (value: object) => encoder.encode(`${JSON.stringify(value)}\n`);

  function event(text: string, controller: TransformStreamDefaultController<Uint8Array>): void {
    if (ended) return;
    for (const row of text.split("\n")) {
      if (!row.startsWith("data:")) continue; // comments, event names, pings
      const data = row.slice(5).trim();
      if (data === "[DONE]") {
        ended = true;
        return controller.enqueue(line(finalLine(kind, model, state, clock())));
      }
      const chunk = JSON.parse(data) as OpenAIAnswer;
      if (chunk.error) {
        ended = true; // a failed stream ends with Ollama's error line, no `done`
        return controller.enqueue(line({ error: chunk.error.message ?? "generation failed" }));
      }
      const out = streamLine(kind, model, chunk, state, clock().now);
      if (out) controller.enqueue(line(out));
    }
  }

  return new TransformStream({
    transform(chunk, controller) {
      for (const text of split.push(chunk)) event(text, controller);
    },
    flush(controller) {
      const rest = split.rest();
      if (rest.trim()) event(rest, controller);
    },
  });
}

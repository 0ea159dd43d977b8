// Server-sent events read as they arrive: the bytes of an SSE stream split into whole events, each
// handed on once its blank line has come, for the transforms that rewrite or watch a runner's stream.

export type SseSplitter = {
  /** The events `chunk` completed, in order (each without its blank line). */
  push(chunk: Uint8Array): string[];
  /** What is left once the stream ended: an event with no blank line after it, or "". */
  rest(): string;
};

export function sseSplitter(): SseSplitter {
  const decoder = new TextDecoder();
  let pending = "";
  return {
    push(chunk) {
      pending += decoder.decode(chunk, { stream: true });
      const events: string[] = [];
      let end: number;
      while ((end = pending.indexOf("\n\n")) >= 0) {
        events.push(pending.slice(0, end));
        pending = pending.slice(end + 2);
      }
      return events;
    },
    rest() {
      const rest = pending + decoder.decode();
      pending = "";
      return rest;
    },
  };
}

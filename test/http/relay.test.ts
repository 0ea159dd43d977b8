import { describe, expect, it } from "vitest";
import { relay } from "../../src/http/relay.ts";
import { ChunkQueue, streamOf, type ChunkReader } from "../../src/runtime/chunks.ts";

// The relay on its own: a source that stalls while its runner dies, one that ends, a client that leaves.

const bytes = (text: string) => new TextEncoder().encode(text);
const text = async (reader: ChunkReader) => new Response(streamOf(reader)).text();

/** A source that sends `chunks` and then waits forever, remembering why it was cancelled. */
function stalledSource(chunks: string[]) {
  const seen: { cancelled?: unknown } = {};
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(bytes(chunk));
    },
    cancel(reason) {
      seen.cancelled = reason;
    },
  });
  return { stream, seen };
}

describe("relay", () => {
  it("passes every chunk on and calls done once at the end", async () => {
    let done = 0;
    const source = new Response("data: 1\n\ndata: 2\n\n").body!;
    const relayed = relay(source.getReader(), { died: new AbortController().signal, clientGone: new AbortController().signal }, () => done++, async () => undefined);
    expect(await text(relayed)).toBe("data: 1\n\ndata: 2\n\n");
    expect(done).toBe(1);
  });

  it("hands on the chunks at hand without a promise, shown each and done called once, and leaves a dead runner's end to a read", async () => {
    const queue = new ChunkQueue({ pause() {}, resume() {}, cancel() {} });
    const shown: number[] = [];
    let done = 0;
    const relayed = relay(queue, { died: new AbortController().signal, clientGone: new AbortController().signal }, () => done++, async () => undefined, (chunk) => shown.push(chunk.length));
    expect(relayed.take!()).toBeUndefined();
    queue.push(bytes("data: 1\n\n"));
    queue.push(bytes("data: [DONE]\n\n"));
    queue.end();
    const taken = [relayed.take!(), relayed.take!(), relayed.take!()];
    expect(taken.map((chunk) => chunk?.done)).toEqual([false, false, true]);
    expect([shown, done]).toEqual([[9, 14], 1]);
    const died = new AbortController();
    const dying = new ChunkQueue({ pause() {}, resume() {}, cancel() {} });
    dying.push(bytes("data: 1\n\n"));
    const last = relay(dying, { died: died.signal, clientGone: new AbortController().signal }, () => {}, async () => bytes("data: the end\n\n"));
    died.abort(new Error("the runner died"));
    expect(last.take!()).toBeUndefined();
    expect(await text(last)).toBe("data: the end\n\n");
  });

  it("ends a read that waits on a runner that died with its last words, and cancels the source", async () => {
    const died = new AbortController();
    const { stream, seen } = stalledSource(["data: 1\n\n"]);
    let done = 0;
    const failures: unknown[] = [];
    const relayed = relay(stream.getReader(), { died: died.signal, clientGone: new AbortController().signal }, () => done++, async (error) => {
      failures.push(error);
      return bytes("data: the end\n\n");
    });
    const reading = text(relayed);
    setTimeout(() => died.abort(new Error("the runner died")), 20);
    expect(await reading).toBe("data: 1\n\ndata: the end\n\n");
    expect(failures).toEqual([new Error("the runner died")]);
    expect(seen.cancelled).toEqual(new Error("the runner died"));
    expect(done).toBe(1);
  });

  it("fails at once when the runner died before the first read", async () => {
    const died = new AbortController();
    died.abort(new Error("gone already"));
    const { stream } = stalledSource([]);
    const relayed = relay(stream.getReader(), { died: died.signal, clientGone: new AbortController().signal }, () => {}, async () => undefined);
    await expect(text(relayed)).rejects.toThrow("gone already");
  });

  it("cancels the source when its client leaves, read or not", async () => {
    const gone = new AbortController();
    const { stream, seen } = stalledSource(["data: 1\n\n"]);
    let done = 0;
    relay(stream.getReader(), { died: new AbortController().signal, clientGone: gone.signal }, () => done++, async () => undefined);
    gone.abort(new Error("left"));
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(seen.cancelled).toEqual(new Error("left"));
    expect(done).toBe(1);
  });

  it("calls done once when its client leaves while a read waits", async () => {
    const gone = new AbortController();
    const { stream } = stalledSource(["data: 1\n\n"]);
    let done = 0;
    const reader = relay(stream.getReader(), { died: new AbortController().signal, clientGone: gone.signal }, () => done++, async () => undefined);
    await reader.read();
    const waiting = reader.read().catch(() => undefined);
    gone.abort(new Error("left"));
    await waiting;
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(done).toBe(1);
  });
});

describe("relay, a client that stops reading", () => {
  it("cancels the source after clientStallMs unread, and fails the client's next read", async () => {
    const { stream, seen } = stalledSource(["data: 1\n\n", "data: 2\n\n"]);
    let done = 0;
    const reader = relay(stream.getReader(), { died: new AbortController().signal, clientGone: new AbortController().signal, clientStallMs: 30 }, () => done++, async () => bytes("never"));
    expect((await reader.read()).done).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect([String(seen.cancelled), done]).toEqual(["Error: the client read nothing for 30 ms", 1]);
    await expect(reader.read()).rejects.toThrow("the client read nothing for 30 ms");
  });

  it("ends after its last words, and reads as done after them", async () => {
    const died = new AbortController();
    const { stream } = stalledSource([]);
    const reader = relay(stream.getReader(), { died: died.signal, clientGone: new AbortController().signal }, () => {}, async () => bytes("data: the end\n\n"));
    died.abort(new Error("the runner died"));
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("data: the end\n\n");
    expect((await reader.read()).done).toBe(true);
  });
});

describe("relay, cancelled", () => {
  it("ends a read in flight as done when its client leaves, though its source then fails (no rejection nobody hears)", async () => {
    let fail!: (error: unknown) => void;
    const source = { read: () => new Promise<ReadableStreamReadResult<Uint8Array>>((_, reject) => (fail = reject)), cancel: async () => {} };
    const gone = new AbortController();
    const died = new AbortController();
    const reader = relay(source, { died: died.signal, clientGone: gone.signal }, () => {}, async () => undefined);
    const reading = reader.read();
    gone.abort(new Error("the client went away"));
    died.abort(gone.signal.reason);
    fail(gone.signal.reason);
    expect(await reading).toEqual({ done: true, value: undefined });
    expect(await reader.read()).toEqual({ done: true, value: undefined });
  });
});

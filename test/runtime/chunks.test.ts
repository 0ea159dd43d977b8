import { describe, expect, it } from "vitest";
import { ChunkQueue, failedReader, KEPT_BYTES, streamOf } from "../../src/runtime/chunks.ts";

// The chunk queue on its own: what a body's reader gets without a web stream (src/runtime/chunks.ts),
// and how it slows, speeds and stops the producer behind it.

const bytes = (text: string) => new TextEncoder().encode(text);
const text = (chunk: ReadableStreamReadResult<Uint8Array>) => (chunk.done ? "(done)" : new TextDecoder().decode(chunk.value));

/** A queue whose producer's calls are written down. */
function watched(keptBytes?: number) {
  const calls: string[] = [];
  const queue = new ChunkQueue({ pause: () => calls.push("pause"), resume: () => calls.push("resume"), cancel: (reason) => calls.push(`cancel: ${String(reason)}`) }, keptBytes);
  return { queue, calls };
}

describe("a chunk queue", () => {
  it("hands a chunk to a read that waits, and (keeping none ahead) pauses its producer while a chunk waits for a read", async () => {
    const { queue, calls } = watched(0);
    const waiting = queue.read();
    queue.push(bytes("a"));
    expect(text(await waiting)).toBe("a");
    expect(calls).toEqual([]);
    queue.push(bytes("b"));
    queue.push(bytes("c"));
    expect(calls).toEqual(["pause"]);
    expect(text(await queue.read())).toBe("b");
    expect(calls).toEqual(["pause"]);
    expect(text(await queue.read())).toBe("c");
    expect(calls).toEqual(["pause", "resume"]);
    queue.end();
    expect([text(await queue.read()), text(await queue.read())]).toEqual(["(done)", "(done)"]);
  });

  it("keeps a short answer's chunks without pausing, and pauses past KEPT_BYTES until reads take them", async () => {
    const { queue, calls } = watched();
    for (const piece of ["data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"]) queue.push(bytes(piece));
    expect(calls).toEqual([]);
    const big = new Uint8Array(KEPT_BYTES);
    queue.push(big);
    expect(calls).toEqual(["pause"]);
    for (let i = 0; i < 3; i++) await queue.read();
    expect(calls).toEqual(["pause"]);
    expect((await queue.read()).value).toBe(big);
    expect(calls).toEqual(["pause", "resume"]);
  });

  it("hands on what it kept before the producer's error, then the error, to every read after", async () => {
    const { queue } = watched();
    queue.push(bytes("kept"));
    queue.fail(new Error("the producer failed"));
    expect(text(await queue.read())).toBe("kept");
    await expect(queue.read()).rejects.toThrow("the producer failed");
    await expect(queue.read()).rejects.toThrow("the producer failed");
    const waiting = watched().queue;
    const read = waiting.read();
    waiting.fail(new Error("while a read waited"));
    await expect(read).rejects.toThrow("while a read waited");
  });

  it("on cancel stops its producer, ends a read that waits as done, and drops what comes after", async () => {
    const { queue, calls } = watched();
    const read = queue.read();
    await queue.cancel("the client left");
    expect(text(await read)).toBe("(done)");
    queue.push(bytes("late"));
    queue.fail(new Error("late too"));
    expect(text(await queue.read())).toBe("(done)");
    expect(calls).toEqual(["cancel: the client left"]);
    const ended = watched();
    ended.queue.end();
    await ended.queue.cancel("after its end");
    expect(ended.calls).toEqual([]);
  });

  it("gives what a read would get now without a promise, and nothing where a read would wait or fail", () => {
    const { queue, calls } = watched(0);
    expect(queue.take()).toBeUndefined();
    queue.push(bytes("a"));
    queue.push(bytes("b"));
    expect(calls).toEqual(["pause"]);
    expect([text(queue.take()!), calls]).toEqual(["a", ["pause"]]);
    expect([text(queue.take()!), calls]).toEqual(["b", ["pause", "resume"]]);
    expect(queue.take()).toBeUndefined();
    queue.end();
    expect([text(queue.take()!), text(queue.take()!)]).toEqual(["(done)", "(done)"]);
    const failed = watched().queue;
    failed.push(bytes("c"));
    failed.fail(new Error("reset"));
    expect([text(failed.take()!), failed.take()]).toEqual(["c", undefined]);
    const cancelled = watched().queue;
    void cancelled.cancel();
    expect(text(cancelled.take()!)).toBe("(done)");
  });

  it("reads as a web stream, a chunk per pull, and cancels through it", async () => {
    const { queue, calls } = watched(0);
    queue.push(bytes("one "));
    const stream = streamOf(queue);
    setTimeout(() => (queue.push(bytes("two")), queue.end()), 10);
    expect(await new Response(stream).text()).toBe("one two");
    const other = watched();
    const reader = streamOf(other.queue).getReader();
    await reader.cancel("gone");
    expect(other.calls).toEqual(["cancel: gone"]);
    expect(calls).toEqual(["pause", "resume"]);
    await expect(new Response(streamOf(failedReader(new Error("failed first")))).text()).rejects.toThrow("failed first");
  });
});

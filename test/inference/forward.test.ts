import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { forward } from "../../src/inference/forward.ts";
import type { Lease } from "../../src/scheduler/runner.ts";

// forward()'s answer to an error before any response (B17.1): a runner that still runs had closed
// the connection (retried once, on its own); a runner that died is reported at once, with its exit.

function lease(attempts: Array<() => Promise<Response>>, running: () => boolean, exited = new Promise<Error>(() => {})) {
  const sent: RequestInit[] = [];
  let released = 0;
  const value: Lease = {
    fetch: (async (_url: string, init: RequestInit) => {
      sent.push(init);
      return attempts[sent.length - 1]!();
    }) as unknown as typeof fetch,
    exited,
    running,
    died: new AbortController().signal,
    sending: () => {},
    heard: () => {},
    release: () => void released++,
  };
  return { lease: value, sent, released: () => released };
}

const reset = () => Promise.reject(Object.assign(new TypeError("fetch failed"), { cause: { code: "ECONNRESET" } }));
const ok = () => Promise.resolve(Response.json({ ok: true }));
const request = () => new Request("http://us/v1/completions", { method: "POST" });
const forwarded = (l: Lease, stream = false) => ({ lease: l, model: "ai/tiny", path: "/v1/completions", body: new Uint8Array(2), request: request(), stream });

describe("forward, when the connection fails before an answer", () => {
  it("retries once when the runner still runs (it had closed a pooled connection)", async () => {
    const l = lease([reset, ok], () => true);
    const response = await forward(forwarded(l.lease));
    expect(await response.json()).toEqual({ ok: true });
    expect(l.sent).toHaveLength(2);
    expect(l.released()).toBe(1);
  });

  it("answers 502 after a short look for an exit when the retry fails too and the runner still runs", async () => {
    const l = lease([reset, reset], () => true);
    const began = performance.now();
    const error = (await forward(forwarded(l.lease)).catch((e: unknown) => e)) as HttpError;
    expect([error.status, error.code]).toEqual([502, "runner_failed"]);
    expect(error.message).toMatch(/lost the connection \(fetch failed: ECONNRESET\)/);
    expect(performance.now() - began).toBeLessThan(1000);
    expect(l.sent).toHaveLength(2);
    expect(l.released()).toBe(1);
  });

  it("names the exit of a runner whose death is heard of only after its connection broke", async () => {
    // A killed runner's socket closes as it dies; the exit may reach us a moment later.
    const exited = new Promise<Error>((resolve) => setTimeout(() => resolve(new Error("llama-server was killed (SIGKILL)")), 20));
    const l = lease([reset, reset], () => true, exited);
    const error = (await forward(forwarded(l.lease)).catch((e: unknown) => e)) as HttpError;
    expect([error.status, error.code]).toEqual([502, "runner_failed"]);
    expect(error.message).toMatch(/SIGKILL/);
  });

  it("does not retry for a runner that died, and names its exit", async () => {
    const l = lease([reset, ok], () => false, Promise.resolve(new Error("llama-server was killed (SIGKILL)")));
    const error = (await forward(forwarded(l.lease)).catch((e: unknown) => e)) as HttpError;
    expect([error.status, error.code]).toEqual([502, "runner_failed"]);
    expect(error.message).toMatch(/SIGKILL/);
    expect(l.sent).toHaveLength(1);
  });

  it("sends a stream with Connection: close, so its connection (which llama-server closes) is never pooled", async () => {
    const l = lease([ok, ok], () => true);
    await forward(forwarded(l.lease, true));
    await forward(forwarded(l.lease, false));
    expect(l.sent.map((init) => (init.headers as Record<string, string>).connection)).toEqual(["close", undefined]);
  });
});

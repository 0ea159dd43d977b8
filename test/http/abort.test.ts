import { describe, expect, it } from "vitest";
import { unlessAborted } from "../../src/http/abort.ts";

describe("unlessAborted", () => {
  it("settles as the work does while the signal stays quiet", async () => {
    const controller = new AbortController();
    await expect(unlessAborted(Promise.resolve(7), controller.signal)).resolves.toBe(7);
    await expect(unlessAborted(Promise.reject(new Error("broke")), controller.signal)).rejects.toThrow("broke");
  });

  it("rejects with the signal's reason as soon as it aborts, and tells onAbort", async () => {
    const controller = new AbortController();
    let told = 0;
    const waiting = unlessAborted(new Promise<never>(() => {}), controller.signal, () => told++);
    controller.abort(new Error("runner died"));
    await expect(waiting).rejects.toThrow("runner died");
    expect(told).toBe(1);
  });

  it("rejects at once for a signal aborted already", async () => {
    await expect(unlessAborted(Promise.resolve(1), AbortSignal.abort(new Error("gone")))).rejects.toThrow("gone");
  });

  it("lets go of the signal once the work settled: a later abort tells no one", async () => {
    const controller = new AbortController();
    let told = 0;
    await unlessAborted(Promise.resolve(1), controller.signal, () => told++);
    await unlessAborted(Promise.reject(new Error("x")), controller.signal, () => told++).catch(() => {});
    controller.abort();
    expect(told).toBe(0);
  });
});

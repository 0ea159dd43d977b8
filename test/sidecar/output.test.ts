import { describe, expect, it } from "vitest";
import { pump, RunnerOutput } from "../../sidecar/output.ts";

// /dev/full fails every write with ENOSPC: a log on a full disk.
const FULL_DISK = "/dev/full";

function lines(count: number): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let sent = 0;
  return new ReadableStream({
    pull(controller) {
      if (sent === count) return controller.close();
      controller.enqueue(encoder.encode(`line ${sent++}\n`));
    },
  });
}

describe("RunnerOutput", () => {
  it("B10: keeps the in-memory tail when the log file cannot be written", () => {
    const output = new RunnerOutput(FULL_DISK);
    expect(() => output.write("first\n")).not.toThrow();
    output.write("second\n");
    expect(output.tail()).toBe("first\nsecond\n");
    output.close();
  });

  it("B10: pump drains the whole stream though the log file cannot be written", async () => {
    const output = new RunnerOutput(FULL_DISK, { maxBytes: 1024, tailChars: 64 });
    const stream = lines(1_000);
    await pump(stream, output);
    expect(output.tail()).toMatch(/line 999\n$/);
    output.close();
  });
});

import { writeSync } from "node:fs";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { pump, RunnerOutput } from "../../sidecar/output.ts";

// /dev/full fails every write with ENOSPC: a log on a full disk.
const FULL_DISK = "/dev/full";

let dir: string | undefined;
/** The path of a log file in a new temporary folder, removed after the test. */
async function logFile(): Promise<string> {
  dir = await mkdtemp(join(tmpdir(), "llamadock-output-"));
  return join(dir, "runner.log");
}
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

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

describe("RunnerOutput batching", () => {
  const read = (path: string) => readFile(path, "utf8");

  it("writes our own lines at once, pumped output within a moment, and all of it, in order, on close", async () => {
    const path = await logFile();
    const output = new RunnerOutput(path);
    output.write("--- started\n");
    expect(await read(path)).toBe("--- started\n");
    const encoder = new TextEncoder();
    for (let i = 0; i < 1000; i++) output.append(encoder.encode(`line ${i}\n`));
    // Gathered, not written chunk by chunk: then all of it within the flush interval.
    await new Promise((resolve) => setTimeout(resolve, 150));
    const text = await read(path);
    expect(text.split("\n").filter(Boolean)).toHaveLength(1001);
    output.append(encoder.encode("last\n"));
    output.close();
    expect((await read(path)).endsWith("line 999\nlast\n")).toBe(true);
    expect(output.tail().endsWith("last\n")).toBe(true);
  });
});

describe("RunnerOutput written by the child itself", () => {
  it("reads its tail back from the file, and empties a file past its limit into .1", async () => {
    const path = await logFile();
    const output = new RunnerOutput(path, { maxBytes: 1000, tailChars: 20, rollCheckMs: 20 });
    output.write("--- started\n");
    output.writtenByChild();
    // What llama-server would write on the same descriptor.
    writeSync(output.descriptor!, `${"x".repeat(1500)}\nthe last line\n`);
    expect(output.tail()).toBe(`${"x".repeat(1500)}\nthe last line\n`.slice(-20));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect((await stat(`${path}.1`)).size).toBeGreaterThan(1000);
    expect((await stat(path)).size).toBe(0);
    writeSync(output.descriptor!, "after the roll\n");
    expect(await readFile(path, "utf8")).toBe("after the roll\n");
    output.close();
    expect(output.tail()).toBe("after the roll\n");
  });
});

import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readLines, type FileLine } from "../../src/batches/line-reader.ts";

// The reader batches use for their input and results files, on real files: lines across its
// 64 KiB chunks, characters split between chunks, a last line without "\n", lines past the bound.

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-lines-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function linesOf(content: string | Buffer, maxLineBytes?: number): Promise<FileLine[]> {
  const path = join(dir, `f${Math.random()}`);
  await writeFile(path, content);
  const lines: FileLine[] = [];
  for await (const line of readLines(path, maxLineBytes)) lines.push(line);
  return lines;
}

describe("readLines", () => {
  it("gives each line with its number, whether a newline ended it, and where it ends", async () => {
    expect(await linesOf("a\n\nbc\nd")).toEqual([
      { number: 1, text: "a", ended: true, end: 2 },
      { number: 2, text: "", ended: true, end: 3 },
      { number: 3, text: "bc", ended: true, end: 6 },
      { number: 4, text: "d", ended: false, end: 7 },
    ]);
    expect(await linesOf("a\n")).toEqual([{ number: 1, text: "a", ended: true, end: 2 }]);
    expect(await linesOf("")).toEqual([]);
  });

  it("joins lines across chunks, multi-byte characters split between them included", async () => {
    const long = "é".repeat(100_000); // 200 000 bytes: three chunks, a character cut at each edge
    const lines = await linesOf(`x\n${long}\n${"y".repeat(65_535)}\nz`);
    expect(lines.map((l) => l.text)).toEqual(["x", long, "y".repeat(65_535), "z"]);
    expect(lines.at(-1)!.end).toBe(2 + 200_001 + 65_536 + 1);
  });

  it("does not gather a line past the bound: its text is null, and the next line reads as usual", async () => {
    const lines = await linesOf(`ok\n${"z".repeat(200_000)}\n12345\n123456`, 5);
    expect(lines.map((l) => [l.number, l.text, l.ended])).toEqual([[1, "ok", true], [2, null, true], [3, "12345", true], [4, null, false]]);
  });
});

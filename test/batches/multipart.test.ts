import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { boundaryOf, MultipartError, readParts } from "../../src/batches/multipart.ts";

// The streaming form reader alone (a pure function of bytes in): whatever the content and however
// the bytes are cut into chunks, each part comes out whole, with its name and filename.

const BOUNDARY = "xYz-b0undary";
const encoder = new TextEncoder();

async function* chunked(bytes: Uint8Array, cuts: number[]): AsyncGenerator<Uint8Array> {
  let at = 0;
  for (const cut of [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b)) {
    yield bytes.subarray(at, cut);
    at = cut;
  }
  yield bytes.subarray(at);
}

type Field = { name: string; filename?: string; content: Uint8Array };

function form(fields: Field[], preamble = ""): Uint8Array {
  const pieces: Uint8Array[] = [encoder.encode(preamble)];
  for (const field of fields) {
    const filename = field.filename === undefined ? "" : `; filename="${field.filename}"`;
    pieces.push(encoder.encode(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${field.name}"${filename}\r\n\r\n`), field.content, encoder.encode("\r\n"));
  }
  pieces.push(encoder.encode(`--${BOUNDARY}--\r\nepilogue`));
  return Buffer.concat(pieces);
}

async function parse(body: AsyncIterable<Uint8Array>): Promise<Field[]> {
  const out: Field[] = [];
  for await (const part of readParts(body, BOUNDARY)) {
    const chunks: Uint8Array[] = [];
    for await (const chunk of part.content) chunks.push(Uint8Array.from(chunk));
    out.push({ name: part.name, ...(part.filename !== undefined ? { filename: part.filename } : {}), content: Buffer.concat(chunks) });
  }
  return out;
}

/** Content that keeps coming near the delimiter (CRLFs, dashes, the boundary's beginnings) without holding it, as a form's sender ensures. */
const tricky = fc
  .array(fc.oneof(fc.uint8Array({ maxLength: 40 }), fc.constantFrom(...["\r\n", "\r\n-", "\r\n--", `\r\n--${BOUNDARY.slice(0, 5)}`, `--${BOUNDARY}`, `\r\n--${BOUNDARY.slice(0, -1)}`].map((s) => encoder.encode(s)))), { maxLength: 30 })
  .map((pieces) => Uint8Array.from(Buffer.concat(pieces)))
  .filter((content) => !Buffer.from(content).includes(`\r\n--${BOUNDARY}`));

describe("readParts", () => {
  it("gives back every part whole, however the bytes are chunked", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.record({ name: fc.constantFrom("purpose", "file", "other"), filename: fc.option(fc.constantFrom("a.jsonl", "b c.txt"), { nil: undefined }), content: tricky }), { minLength: 1, maxLength: 4 }), fc.array(fc.nat(), { maxLength: 12 }), fc.constantFrom("", "preamble\r\n"), async (fields, cuts, preamble) => {
        const expected = fields.map((f) => ({ name: f.name, ...(f.filename !== undefined ? { filename: f.filename } : {}), content: Buffer.from(f.content) }));
        expect(await parse(chunked(form(fields, preamble), cuts))).toEqual(expected);
      }),
      { numRuns: 300 },
    );
  });

  it("a part left unread is skipped; the next part still comes", async () => {
    const body = form([{ name: "file", filename: "x", content: encoder.encode("skipped\r\n--almost") }, { name: "purpose", content: encoder.encode("batch") }]);
    const names: string[] = [];
    for await (const part of readParts(chunked(body, [3, 50, 51, 90]), BOUNDARY)) names.push(part.name);
    expect(names).toEqual(["file", "purpose"]);
  });

  it("a form cut short, or with a part without a name, is a MultipartError", async () => {
    const whole = form([{ name: "file", filename: "x", content: encoder.encode("abc") }]);
    await expect(parse(chunked(whole.subarray(0, whole.length - 20), []))).rejects.toThrow(MultipartError);
    const nameless = encoder.encode(`--${BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--${BOUNDARY}--\r\n`);
    await expect(parse(chunked(nameless, []))).rejects.toThrow(MultipartError);
    const endless = encoder.encode(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="a"; x="${"y".repeat(20_000)}`);
    await expect(parse(chunked(endless, [100, 5000]))).rejects.toThrow(/headers take more than/);
  });

  it("filenames as fetch's FormData and RFC 5987 write them", async () => {
    const body = encoder.encode(
      `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a%22b.jsonl"\r\n\r\n1\r\n` +
        `--${BOUNDARY}\r\ncontent-disposition: form-data; name=file; filename*=UTF-8''caf%C3%A9.jsonl\r\n\r\n2\r\n--${BOUNDARY}--`,
    );
    expect((await parse(chunked(body, []))).map((p) => p.filename)).toEqual(['a"b.jsonl', "café.jsonl"]);
  });

  it("boundaryOf reads multipart/form-data only", () => {
    expect(boundaryOf(`multipart/form-data; boundary=${BOUNDARY}`)).toBe(BOUNDARY);
    expect(boundaryOf('Multipart/Form-Data; charset=utf-8; boundary="a b"')).toBe("a b");
    expect(boundaryOf("application/json")).toBeUndefined();
    expect(boundaryOf("multipart/form-data")).toBeUndefined();
    expect(boundaryOf(null)).toBeUndefined();
  });
});

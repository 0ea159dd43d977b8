import { crc32, deflateSync } from "node:zlib";

// Small real PNG images for tests, encoded by hand (the format is a signature and three chunks):
// 8-bit RGB, no interlace, every row unfiltered, the pixels deflated by zlib.

export type Rgb = [number, number, number];

const SIGNATURE = Uint8Array.of(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a);

/** A chunk: its length, its type, its data, and the CRC-32 of type and data. */
function chunk(type: string, data: Uint8Array): Buffer {
  const typed = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const out = Buffer.alloc(4 + typed.length + 4);
  out.writeUInt32BE(data.length, 0);
  typed.copy(out, 4);
  out.writeUInt32BE(crc32(typed), 4 + typed.length);
  return out;
}

/** A `width` x `height` PNG whose pixel at (x, y) is `colour(x, y)`. */
export function png(width: number, height: number, colour: (x: number, y: number) => Rgb): Uint8Array {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8); // bit depth 8, colour type 2 (RGB), deflate, filters, no interlace
  const rows = Buffer.alloc(height * (1 + width * 3));
  for (let y = 0; y < height; y++) {
    const row = y * (1 + width * 3); // its first byte, 0, says "no filter"
    for (let x = 0; x < width; x++) rows.set(colour(x, y), row + 1 + x * 3);
  }
  return Buffer.concat([SIGNATURE, chunk("IHDR", header), chunk("IDAT", deflateSync(rows)), chunk("IEND", new Uint8Array())]);
}

/** A PNG of one colour. */
export const solidPng = (width: number, height: number, rgb: Rgb) => png(width, height, () => rgb);

/** As a data: URL, as chat requests carry an image inline. */
export const pngDataUrl = (image: Uint8Array) => `data:image/png;base64,${Buffer.from(image).toString("base64")}`;

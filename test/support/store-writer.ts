import { createHash } from "node:crypto";
import { createModelStore } from "../../src/models/index.ts";

// A process that writes to a store folder and exits: `<root> <prefix> <count>` adds `count`
// models tagged `<prefix>/m<i>:latest`, one after the other, each with weights of its own plus
// one blob that every writer shares. Run by tests, several at once, to show that no writer's
// entries are lost and that the shared blob is downloaded by one of them at a time.

const [root, prefix, count] = process.argv.slice(2);
const store = createModelStore(root!);
const digestOf = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
const bytesSource = (bytes: Uint8Array) => async (range: { start: number; end?: number }) => ({
  body: new Blob([bytes.subarray(range.start, range.end) as Uint8Array<ArrayBuffer>]).stream() as ReadableStream<Uint8Array>,
  start: range.start,
  ranged: range.start > 0 || range.end !== undefined,
});

async function put(bytes: Uint8Array): Promise<string> {
  const digest = digestOf(bytes);
  await store.downloadBlob({ digest, size: bytes.byteLength, source: bytesSource(bytes), signal: new AbortController().signal });
  return digest;
}

const shared = new TextEncoder().encode("a projector every writer's models share");
for (let i = 0; i < Number(count); i++) {
  const tag = `${prefix}/m${i}:latest`;
  const gguf = await put(new TextEncoder().encode(`weights of ${tag}`));
  const mmproj = await put(shared);
  await store.add({ manifest: new TextEncoder().encode(tag), tag, created: 1, config: {}, files: { gguf: [gguf], mmproj } });
}
await store.close();

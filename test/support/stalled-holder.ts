import { createInterface } from "node:readline";
import { createModelStore } from "../../src/models/index.ts";
import { rangeAnswer, rangeHeader } from "../../src/models/store/source.ts";
import { updateIndex } from "../../src/models/store/model-index.ts";
import { lockHeartbeat } from "../../src/models/store/lock-file.ts";

// A process that holds one of a store's locks for a test to stop (SIGSTOP) and wake (SIGCONT):
//   <root> <lockStaleMs> blob <url> <digest> <size>   downloads the blob from `url` (one stream)
//   <root> <lockStaleMs> index <tag>                  changes the index: says "changing" on stdout
//                                                     once it holds the lock and has read the index,
//                                                     then waits for a line on stdin to write
// It ends with "done" or "error: <message>" on stdout (exit status 0 or 1).

const [root, staleMs, what, ...rest] = process.argv.slice(2);
const lockStaleMs = Number(staleMs);
const store = createModelStore(root!, {}, { lockStaleMs });

async function download(url: string, digest: string, size: number): Promise<void> {
  await store.downloadBlob({
    digest,
    size,
    signal: new AbortController().signal,
    source: async (range, signal) => {
      const response = await fetch(url, { headers: rangeHeader(range), signal });
      return { body: response.body!, ...rangeAnswer(response, range) };
    },
  });
}

async function change(tag: string): Promise<void> {
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const gguf = `sha256:${"1".repeat(64)}`;
  await updateIndex(
    store.layout,
    async (models) => {
      process.stdout.write("changing\n");
      await lines.next();
      return { models: [...models, { id: `sha256:${"2".repeat(64)}`, tags: [tag], created: 1, config: {}, files: { gguf: [gguf] } }], result: undefined };
    },
    lockHeartbeat(lockStaleMs),
  );
}

try {
  if (what === "blob") await download(rest[0]!, rest[1]!, Number(rest[2]));
  else await change(rest[0]!);
  process.stdout.write("done\n");
  process.exitCode = 0;
} catch (error) {
  process.stdout.write(`error: ${(error as Error).message}\n`);
  process.exitCode = 1;
} finally {
  await store.close();
  process.exit();
}

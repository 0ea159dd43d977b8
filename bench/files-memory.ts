import { createHash } from "node:crypto";
import { request } from "node:http";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRunnerService } from "../test/inference/harness.ts";
import type { Registry } from "../test/support/registry.ts";
import type { RuntimeName, ServerProcess } from "../test/support/server-process.ts";

// What OpenAI Files cost the server's memory: the model runner (as `npm start` runs it, under Bun
// unless another runtime is named) takes a chunked upload of BENCH_FILE_GIB (5) GiB, generated as
// it is sent (never from disk), then serves it back as a download read to its end. The server's
// RSS (/proc/<pid>/status) is sampled every 50 ms: idle before, the peak while uploading and while
// downloading, and after. The download's digest must equal the upload's.
//
//   npm run bench:files [-- bun|node|deno]   (BENCH_FILE_GIB=5)

const runtime = (process.argv[2] ?? "bun") as RuntimeName;
const gib = Number(process.env.BENCH_FILE_GIB ?? 5);
const total = Math.round(gib * 2 ** 30);
const PIECE = 1 << 20;
const BOUNDARY = "----bench-files-boundary";
const KEY = "sk-bench-files";

const mib = (bytes: number) => bytes / 2 ** 20;
const rssOf = async (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(await readFile(`/proc/${pid}/status`, "utf8"))?.[1]) * 1024;

/** The highest RSS seen since the last `take()`. */
function sampler(pid: number) {
  let peak = 0;
  const timer = setInterval(() => void rssOf(pid).then((rss) => (peak = Math.max(peak, rss)), () => {}), 50);
  return {
    take: async () => {
      const seen = Math.max(peak, await rssOf(pid));
      peak = 0;
      return seen;
    },
    stop: () => clearInterval(timer),
  };
}

/** JSONL batch lines, a MiB of them, each piece stamped with its number so that no two are alike. */
function pieces(): { next(i: number): Buffer } {
  const line = (n: number) => `{"custom_id":"r${n}","method":"POST","url":"/v1/chat/completions","body":{"model":"ai/tiny","messages":[{"role":"user","content":"hello"}]}}\n`;
  let text = "";
  for (let n = 0; text.length < PIECE; n++) text += line(n);
  const piece = Buffer.from(text.slice(0, PIECE));
  return { next: (i) => (piece.write(String(i).padStart(12, "0"), 14, "latin1"), piece) };
}

/** POST /v1/files, chunked (no Content-Length), `total` bytes of content; resolves with the file's id and the content's digest. */
function upload(url: URL): Promise<{ id: string; digest: string }> {
  const hash = createHash("sha1");
  const outgoing = request({ host: url.hostname, port: url.port, method: "POST", path: "/v1/files", headers: { authorization: `Bearer ${KEY}`, "content-type": `multipart/form-data; boundary=${BOUNDARY}` } });
  const answered = new Promise<{ id: string; digest: string }>((resolve, reject) => {
    outgoing.once("error", reject);
    outgoing.once("response", (response) => {
      let text = "";
      response.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
      response.once("end", () => (response.statusCode === 200 ? resolve({ id: JSON.parse(text).id, digest: hash.digest("hex") }) : reject(new Error(`upload: ${response.statusCode} ${text}`))));
    });
  });
  void (async () => {
    outgoing.write(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n\r\n`);
    const source = pieces();
    for (let i = 0, sent = 0; sent < total; i++, sent += PIECE) {
      const piece = source.next(i).subarray(0, Math.min(PIECE, total - sent));
      hash.update(piece);
      if (!outgoing.write(piece)) await new Promise((resolve) => outgoing.once("drain", resolve));
    }
    outgoing.end(`\r\n--${BOUNDARY}--\r\n`);
  })();
  return answered;
}

/** GET /v1/files/{id}/content read to its end: its length and digest. */
async function download(url: URL, id: string): Promise<{ bytes: number; digest: string }> {
  const response = await fetch(new URL(`/v1/files/${id}/content`, url), { headers: { authorization: `Bearer ${KEY}` } });
  if (response.status !== 200 || !response.body) throw new Error(`download: ${response.status} ${await response.text()}`);
  const hash = createHash("sha1");
  let bytes = 0;
  const reader = response.body.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
    hash.update(chunk.value);
    bytes += chunk.value.byteLength;
  }
  return { bytes, digest: hash.digest("hex") };
}

const dir = await mkdtemp(join(tmpdir(), "llamadock-bench-files-"));
let server: ServerProcess | undefined;
try {
  await writeFile(join(dir, "keys"), `${KEY} name=bench\n`);
  const registry = { host: "127.0.0.1:9" } as Registry; // no model is pulled
  server = await startRunnerService(runtime, dir, registry, {
    API_KEYS_FILE: join(dir, "keys"),
    FILE_MAX_BYTES: `${Math.ceil(gib) + 1}GiB`,
    KEY_MAX_FILE_BYTES: `${Math.ceil(gib) + 1}GiB`,
  });
  const url = new URL(/model runner service listening on (http:\/\/[\d.:]+)/.exec(server.output())![1]!);
  await (await fetch(new URL("/v1/files", url), { headers: { authorization: `Bearer ${KEY}` } })).arrayBuffer();
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const rss = sampler(server.pid);
  const idle = await rss.take();
  let began = performance.now();
  const sent = await upload(url);
  const uploadS = (performance.now() - began) / 1000;
  const uploadPeak = await rss.take();
  began = performance.now();
  const back = await download(url, sent.id);
  const downloadS = (performance.now() - began) / 1000;
  const downloadPeak = await rss.take();
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const after = await rss.take();
  rss.stop();
  if (back.bytes !== total || back.digest !== sent.digest) throw new Error(`the download is not the upload: ${back.bytes} bytes, sha1 ${back.digest} (sent ${total}, ${sent.digest})`);
  const peak = Math.max(uploadPeak, downloadPeak);
  console.log(`files memory, ${runtime}: ${gib} GiB up (chunked) and down, the same bytes (sha1 ${sent.digest.slice(0, 12)})`);
  console.log(`  upload   ${uploadS.toFixed(1)} s (${(mib(total) / uploadS).toFixed(0)} MiB/s), RSS peak ${mib(uploadPeak).toFixed(1)} MiB`);
  console.log(`  download ${downloadS.toFixed(1)} s (${(mib(total) / downloadS).toFixed(0)} MiB/s), RSS peak ${mib(downloadPeak).toFixed(1)} MiB`);
  console.log(`  RSS idle ${mib(idle).toFixed(1)} MiB, peak ${mib(peak).toFixed(1)} MiB, after ${mib(after).toFixed(1)} MiB; peak/idle ${(peak / idle).toFixed(2)}`);
} finally {
  await server?.stop(5_000);
  await rm(dir, { recursive: true, force: true });
}

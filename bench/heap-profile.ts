import { Session } from "node:inspector";
import { writeFileSync } from "node:fs";
import { setFlagsFromString } from "node:v8";

// What a Node server allocates, by function, over a window of its life: loaded before the server,
//
//   HEAP_PROFILE=ours.heapprofile node --import ./bench/heap-profile.ts src/index.ts
//
// it samples every allocation from HEAP_PROFILE_AFTER_S (15) seconds after the start, for
// HEAP_PROFILE_FOR_S (8), objects that young collections freed included, and writes V8's sampling
// heap profile (`npm run -s heap-report -- ours.heapprofile` reads it). Steadier than CPU timings on
// a shared machine, where these move by a tenth between runs. HEAP_PROFILE_NO_INLINING=1 turns V8's
// inlining off, so that an inlined callee's objects are not charged to its caller (slower, and
// shaped a little differently, but named exactly).

// "{pid}" in the path is replaced by the process id (to tell apart processes started with the same options).
const output = process.env.HEAP_PROFILE?.replace("{pid}", String(process.pid));
if (output) {
  if (process.env.HEAP_PROFILE_NO_INLINING === "1") setFlagsFromString("--no-turbo-inlining --no-maglev-inlining");
  const session = new Session();
  session.connect();
  const post = <T>(method: string, params: object = {}) =>
    new Promise<T>((resolve, reject) => session.post(method, params, (error, result) => (error ? reject(error) : resolve(result as T))));
  const seconds = (name: string, fallback: number) => 1000 * Number(process.env[name] ?? fallback);
  const start = setTimeout(async () => {
    await post("HeapProfiler.enable");
    await post("HeapProfiler.startSampling", { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
    // Written when the window ends, or when the process exits first (HEAP_PROFILE_FOR_S=0: until
    // the exit; the inspector answers a session of its own thread at once, so it is written then).
    const write = () => {
      session.post("HeapProfiler.stopSampling", (error, result) => {
        if (error) return;
        writeFileSync(output, JSON.stringify(result.profile));
        console.log(`heap profile written to ${output}`);
      });
    };
    const forMs = seconds("HEAP_PROFILE_FOR_S", 8);
    process.once("exit", write);
    if (forMs > 0) setTimeout(() => (process.off("exit", write), write()), forMs).unref();
  }, seconds("HEAP_PROFILE_AFTER_S", 15));
  start.unref();
}

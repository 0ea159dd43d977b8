import { detectRuntime } from "../../src/runtime/index.ts";
import { adapterInference } from "./adapter-inference.ts";

// A step between a floor and ours (bench:runtimes and bench:inference with BENCH_STEPS=1): the bare proxy of
// floor.ts, written as a fetch handler and served through our runtime adapter (runtime.serve and
// the runtime's upstream or Unix-socket fetch), with none of our routes, checks or scheduling.
// Its distance to the floor is the adapter's; its distance to ours is the handlers'.

const runtime = await detectRuntime();
const kind = process.env.FLOOR ?? "album";
const base = process.env.PHOTOS_API_BASE_URL ?? "";
const call = kind === "album" ? runtime.upstreamFetch : runtime.unixFetch(process.env.RUNNER_UPSTREAM_SOCKET ?? "");

async function album(request: Request): Promise<Response> {
  const albumId = request.url.slice(request.url.lastIndexOf("/") + 1);
  const upstream = await call(`${base}/albums/${albumId}/photos`, { headers: { accept: "application/json" }, signal: request.signal });
  return Response.json({ albumId: Number(albumId), photos: JSON.parse(await upstream.text()) });
}

const target = kind === "album" ? { kind: "tcp" as const, hostname: "127.0.0.1", port: 0 } : { kind: "unix" as const, path: process.env.PROXY_SOCKET ?? "" };
// The server's default limits; past the cap, a plain 503 (the bare proxy has no error shape of its own).
const limits = { headersTimeoutMs: 10_000, bodyIdleTimeoutMs: 60_000, maxConnections: 1024, overloaded: () => new Response("overloaded", { status: 503 }), stalledBody: () => new Error("body stalled") };
const listener = await runtime.serve(kind === "album" ? album : adapterInference(call), target, limits);
console.log(`${kind} adapter proxy (${runtime.name}) listening on ${listener.address}`);
runtime.onShutdownSignal(() => void listener.close(1_000).then(() => runtime.exit(0)));

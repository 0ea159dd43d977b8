import { detectRuntime } from "./runtime/index.ts";
import { tuneV8ForServing } from "./runtime/v8-tuning.ts";

// Entry point. V8's collector is tuned first (src/runtime/v8-tuning.ts), and only then is the
// server loaded (src/main.ts, which starts serving as it loads): V8 makes an allocation site when
// the code at it first runs, so the server's are all made under that tuning.

tuneV8ForServing((await detectRuntime()).name);
await import("./main.ts");

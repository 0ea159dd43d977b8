import { detectRuntime } from "./runtime/index.ts";
import { tuneV8ForServing } from "./runtime/v8-tuning.ts";

// Entry point. V8's collector is tuned first (src/runtime/v8-tuning.ts), and only then is the
// server loaded (src/main.ts): every site its code allocates at is made under that tuning.

tuneV8ForServing((await detectRuntime()).name);
await import("./main.ts");

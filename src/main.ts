import { buildServices } from "./app.ts";
import { ConfigError, loadConfig } from "./config.ts";
import { guard } from "./http/guard.ts";
import { allocatorAdvice } from "./runtime/bun-allocator.ts";
import { detectRuntime, type Listener } from "./runtime/index.ts";
import { serveOptions, shutDown } from "./service.ts";

// The server: config -> runtime adapter -> services -> listen; close cleanly on SIGINT/SIGTERM.
// Started by src/index.ts.

const runtime = await detectRuntime();
const listeners: Listener[] = [];

async function main(): Promise<void> {
  const config = loadConfig(process.env, process.argv.slice(2));
  const services = await buildServices(config, runtime);
  const advice = allocatorAdvice(runtime.name, process.env);
  if (advice) console.log(advice);
  runtime.onShutdownSignal(async (signal) => {
    console.log(`${signal} received: finishing in-flight requests`);
    await shutDown(services, config.shutdownGraceMs, (graceLeftMs) => Promise.allSettled(listeners.map((l) => l.close(graceLeftMs))));
    console.log("stopped");
    runtime.exit(0);
  });
  for (const service of services) {
    for (const target of service.targets) {
      const listener = await runtime.serve(guard(service.handler, target, service.policy), target, serveOptions(config));
      listeners.push(listener);
      console.log(`${service.name} service listening on ${listener.address} (${runtime.name} ${runtime.version})`);
    }
  }
}

try {
  await main();
} catch (error) {
  await Promise.allSettled(listeners.map((l) => l.close(0)));
  const message = error instanceof ConfigError ? error.message : `cannot start: ${describeStartError(error)}`;
  console.error(message);
  runtime.exit(1);
}

function describeStartError(error: unknown): string {
  const e = error as { code?: string; message?: string; name?: string };
  if (e?.code === "EADDRINUSE" || e?.name === "AddrInUse" || /in use/i.test(e?.message ?? "")) {
    return `address already in use (${e.message})`;
  }
  return e?.message ?? String(error);
}

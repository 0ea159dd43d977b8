import { createModelRunner } from "./model-runner.ts";
import { servedByRuntime } from "./serve.ts";

// The model runner for the runtime's own server, configured from the environment; it starts
// llama-server runners, so Deno needs more than the network (see docs/library.md):
//   bun src/library/model-runner-serve.ts                           (RUNNER_HOST:RUNNER_PORT)
//   deno serve --allow-all --unstable-no-legacy-abort src/library/model-runner-serve.ts   (--host, --port)
// SIGINT or SIGTERM drains it and stops its runners. Installed: `llamadock/model-runner/serve`.

export default await servedByRuntime(await createModelRunner({ env: process.env }));

// The llama.cpp sidecar: finding llama-server, and running one per model on its own Unix socket.
export { buildLlamaServerArgs, runnerSpec, type Launch, type LaunchSettings } from "./args.ts";
export { describeBuild, LLAMA_CPP_RELEASE, offloadDevices, resolveLlamaServerBinary, type LlamaServerBinary } from "./binary.ts";
export { SidecarError, type SidecarErrorCode } from "./errors.ts";
export type { Sidecar, SidecarState } from "./process.ts";
export type { EngineBuild, PoolingType, RunnerMode, RunnerSpec } from "./spec.ts";
export { parseHelpFlags, spellFor, spellingsOf } from "./flag-names.ts";
export { createSupervisor, type Supervisor, type SupervisorDeps } from "./supervisor.ts";

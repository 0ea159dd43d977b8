import type { EngineBuild } from "./types.ts";

// Which llama.cpp build a runner runs, as the upgrade compares them: a build is its binary (a
// pulled build's folder is named by its digest, so one path is one build). A runner launched with
// no build named runs the supervisor's own, which is `builtin`.

export const sameBuild = (a: EngineBuild | undefined, b: EngineBuild | undefined): boolean => (a?.path ?? "builtin") === (b?.path ?? "builtin") || (a === undefined && b?.name === "builtin") || (b === undefined && a?.name === "builtin");

export const buildName = (build: EngineBuild | undefined): string => build?.name ?? "builtin";

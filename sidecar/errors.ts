import type { ChildExit } from "../src/runtime/types.ts";

// llama-server reports a failure as log lines on stderr and a bare exit code. This table turns the
// usual ones into one clear line; the full tail stays on the error (and in the runner's log).

export type SidecarErrorCode =
  | "model_not_found"
  | "model_unreadable"
  | "invalid_model"
  | "out_of_memory"
  | "bad_argument"
  | "socket_in_use"
  | "spawn_failed"
  | "ready_timeout"
  | "aborted"
  | "exited";

export class SidecarError extends Error {
  override readonly name = "SidecarError";
  readonly code: SidecarErrorCode;
  /** The last output of the process (a few KiB), for logs and diagnostics. */
  readonly tail: string;
  readonly exit: ChildExit | undefined;

  constructor(code: SidecarErrorCode, message: string, tail = "", exit?: ChildExit) {
    super(message);
    this.code = code;
    this.tail = tail;
    this.exit = exit;
  }
}

interface Rule {
  pattern: RegExp;
  code: SidecarErrorCode;
  message: (match: RegExpMatchArray, tail: string) => string;
}

// First match wins, so the specific lines come before the generic ones.
const RULES: Rule[] = [
  {
    pattern: /failed to open GGUF file '([^']*)' \(No such file or directory\)/,
    code: "model_not_found",
    message: (m) => `model file not found: ${m[1]}`,
  },
  {
    pattern: /failed to open GGUF file '([^']*)' \(([^)]*)\)/,
    code: "model_unreadable",
    message: (m) => `cannot open model file ${m[1]}: ${m[2]}`,
  },
  {
    pattern: /invalid magic characters/,
    code: "invalid_model",
    message: () => "the model file is not a GGUF file",
  },
  {
    pattern: /not within the file bounds|model is corrupted or incomplete/,
    code: "invalid_model",
    message: () => "the model file is corrupt or incomplete",
  },
  {
    pattern: /unknown model architecture: '([^']*)'/,
    code: "invalid_model",
    message: (m) => `unsupported model architecture: ${m[1]}`,
  },
  {
    pattern: /failed to load multimodal model, '([^']*)'/,
    code: "invalid_model",
    message: (m) => `cannot load the multimodal projector ${m[1]}`,
  },
  {
    pattern: /cudaMalloc failed: out of memory|CUDA error: out of memory|(?:unable|failed) to allocate CUDA\d* buffer/,
    code: "out_of_memory",
    message: (_, tail) => `not enough GPU memory for the model${gpuShortfall(tail)} (try fewer GPU layers or a smaller context)`,
  },
  {
    pattern: /insufficient memory|failed to allocate (?:CPU )?buffer|failed to allocate buffer for kv cache/,
    code: "out_of_memory",
    message: () => "not enough memory for the model (try a smaller context size)",
  },
  {
    pattern: /error: invalid argument: (\S+)/,
    code: "bad_argument",
    message: (m) => `llama-server does not know the option ${m[1]}`,
  },
  {
    pattern: /error while handling argument "([^"]+)": (.+)/,
    code: "bad_argument",
    message: (m) => `invalid value for llama-server option ${m[1]}: ${m[2]?.trim()}`,
  },
  {
    pattern: /couldn't bind HTTP server socket/,
    code: "socket_in_use",
    message: () => "llama-server could not listen on its socket",
  },
  {
    pattern: /error loading model: (.+)/,
    code: "invalid_model",
    message: (m) => `cannot load the model: ${m[1]?.trim()}`,
  },
];

/**
 * What the failed allocation asked for, as llama.cpp logs it: `allocating 4096.00 MiB on device 0:
 * cudaMalloc failed`, or `failed to allocate CUDA0 buffer of size 4294967296`; and what the device
 * had free when it says (`... MiB free`).
 */
function gpuShortfall(tail: string): string {
  const mib = /allocating ([\d.]+) MiB on device (\d+)/.exec(tail);
  const bytes = /failed to allocate (CUDA\d+) buffer of size (\d+)/.exec(tail);
  const asked = mib ? `${mib[1]} MiB on device ${mib[2]}` : bytes ? `${(Number(bytes[2]) / 1024 ** 2).toFixed(2)} MiB on ${bytes[1]}` : undefined;
  const free = /using device CUDA\d+ .* - (\d+) MiB free/.exec(tail)?.[1];
  if (!asked) return "";
  return `: llama-server could not allocate ${asked}${free ? ` (${free} MiB free)` : ""}`;
}

function describeExit(exit: ChildExit): string {
  return exit.signal ? `killed by ${exit.signal}` : `exited with code ${exit.code}`;
}

/** The error for a llama-server that ended on its own, from its exit status and output tail. */
export function explainExit(exit: ChildExit, tail: string): SidecarError {
  for (const rule of RULES) {
    const match = tail.match(rule.pattern);
    if (match) return new SidecarError(rule.code, rule.message(match, tail), tail, exit);
  }
  const lastError = tail.split("\n").filter((line) => /(?:^|\s)E |error/i.test(line)).pop()?.trim();
  const detail = lastError ? `: ${lastError}` : "";
  return new SidecarError("exited", `llama-server ${describeExit(exit)}${detail}`, tail, exit);
}

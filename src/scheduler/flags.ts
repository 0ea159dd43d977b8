import { spellingsOf } from "../../sidecar/index.ts";

// Extra llama-server flags a user may set per model. An allow-list, because a flag is a way into the
// process: no flag that names a file, a socket, a key or a port, and none that we set ourselves
// (model, host, context size, slots, embeddings, metrics).

const ALLOWED = new Set([
  "-t", "--threads", "-tb", "--threads-batch", "-b", "--batch-size", "-ub", "--ubatch-size",
  "-fa", "--flash-attn", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "--mlock",
  "-nkvo", "--no-kv-offload", "-cb", "--cont-batching", "-nocb", "--no-cont-batching",
  "--rope-scaling", "--rope-freq-base", "--rope-freq-scale", "--yarn-orig-ctx",
  "-ngl", "--n-gpu-layers", "-sm", "--split-mode", "-mg", "--main-gpu", "-ts", "--tensor-split",
  "--pooling", "--seed", "-s", "-n", "--n-predict", "--temp", "--top-k", "--top-p", "--min-p",
  "--repeat-penalty", "--repeat-last-n", "--presence-penalty", "--frequency-penalty",
  "--jinja", "--no-jinja", "--chat-template", "--reasoning-format", "--reasoning-budget",
  "--keep", "--context-shift", "--no-context-shift", "--cache-reuse", "--swa-full", "-kvu", "--kv-unified",
  "--defrag-thold", "-dt", "--no-warmup", "--sse-ping-interval", "--threads-http",
  "-cms", "--checkpoint-min-step", "-lm", "--load-mode",
]);

/** Checks `--flag value`, `--flag=value` lists; returns the reason of the first refusal, if any. */
export function refuseFlags(flags: string[]): string | undefined {
  for (const token of flags) {
    const isValue = !token.startsWith("-") || /^-\d/.test(token);
    const [flag, value] = isValue ? [undefined, token] : splitFlag(token);
    // A flag is allowed under any name llama.cpp gave it (a build is then asked which it takes).
    if (flag !== undefined && !spellingsOf(flag).some((name) => ALLOWED.has(name))) return `flag ${flag} is not allowed`;
    if (value !== undefined && looksLikePath(value)) return `flag values may not be paths ("${value}")`;
  }
  return undefined;
}

function splitFlag(token: string): [string, string | undefined] {
  const eq = token.indexOf("=");
  return eq < 0 ? [token, undefined] : [token.slice(0, eq), token.slice(eq + 1)];
}

const looksLikePath = (value: string) => /[/\\]/.test(value) || value.startsWith("~") || value.startsWith(".");

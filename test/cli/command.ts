import { execFile, spawn } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { projectRoot, watch, type ServerProcess } from "../support/server-process.ts";
import { until } from "../support/until.ts";

// The `llamadock` command as users run it: the package's bin, a child process, its output and exit
// status; in a pipe, in a pseudo-terminal (`script`), or in a tmux pane driven by keystrokes.

export const BIN = join(projectRoot, "bin", "llamadock");

export type Outcome = { code: number; stdout: string; stderr: string };

export type CliEnv = Record<string, string | undefined>;

const childEnv = (env: CliEnv) => {
  const out: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1" };
  delete out.MODEL_RUNNER_HOST;
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) delete out[k];
    else out[k] = v;
  }
  return out;
};

/** Runs the command to its end, `input` on its stdin (a pipe, never a terminal). */
export function llamadock(args: string[], env: CliEnv, input = ""): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, { cwd: projectRoot, env: childEnv(env), stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c));
    child.stderr.on("data", (c: Buffer) => (stderr += c));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(input);
  });
}

/** Starts the command and leaves it running (a followed log, a pull to interrupt). */
export function startLlamadock(args: string[], env: CliEnv): ServerProcess {
  return watch(spawn(BIN, args, { cwd: projectRoot, env: childEnv(env), stdio: ["ignore", "pipe", "pipe"] }));
}

const run = promisify(execFile);

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const commandLine = (args: string[], env: CliEnv) =>
  ["env", ...Object.entries(env).map(([k, v]) => shellQuote(`${k}=${v ?? ""}`)), ...[BIN, ...args].map(shellQuote)].join(" ");

/** Runs the command in a pseudo-terminal (util-linux `script`); its output as the terminal got it. */
export async function inTerminal(args: string[], env: CliEnv): Promise<Outcome> {
  const answer = await run("script", ["-qefc", commandLine(args, { COLUMNS: "120", ...env }), "/dev/null"], { cwd: projectRoot, env: childEnv({}) }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number; stdout: string; stderr: string }) => error,
  );
  return { code: answer.code, stdout: answer.stdout, stderr: answer.stderr };
}

/** A tmux session running the command in a 120x40 pane, on a tmux server of its own. */
export async function tmuxSession(name: string, args: string[], env: CliEnv) {
  const tmux = (...words: string[]) => run("tmux", ["-L", name, ...words]);
  await tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", `${commandLine(args, env)}; echo "[exit $?]"; sleep 600`);
  // The pane's text without the empty rows below the cursor.
  const screen = async () => (await tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", name)).stdout.trimEnd();
  return {
    screen,
    keys: (...keys: string[]) => tmux("send-keys", "-t", name, ...keys),
    async waitFor(pattern: RegExp, what: string) {
      // The screen as it is when the wait fails, not as it was when it began.
      await until(async () => pattern.test(await screen()), what).catch(async (error: Error) => {
        throw new Error(`${error.message}; screen:\n${await screen()}`);
      });
    },
    kill: () => tmux("kill-server").catch(() => {}),
  };
}

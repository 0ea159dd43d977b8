import { describe, expect, it } from "vitest";
import { ago, formatBytes, formatDuration, shortId, splitTag, table } from "../../src/cli/format.ts";
import { linesView } from "../../src/cli/progress.ts";
import { printable } from "../../src/cli/run.ts";
import { targetOf } from "../../src/cli/client.ts";
import { caches, describeFit } from "../../src/cli/fit.ts";

// The command's pure parts: text formatting, the plain-lines progress, where it calls.

describe("formatting", () => {
  it.each([
    [0, "0 B"],
    [999, "999 B"],
    [1000, "1.00 kB"],
    [469_312, "469.31 kB"],
    [4_194_304, "4.19 MB"],
    [7_500_000_000, "7.50 GB"],
  ])("formatBytes(%d) = %s", (bytes, text) => expect(formatBytes(bytes)).toBe(text));

  it.each([
    [0, "0s"],
    [1_499, "1s"],
    [75_000, "1m15s"],
    [3_600_000, "1h0m0s"],
  ])("formatDuration(%d) = %s", (ms, text) => expect(formatDuration(ms)).toBe(text));

  it.each([
    [0, "just now"],
    [59_000, "just now"],
    [60_000, "1 minute ago"],
    [7_200_000, "2 hours ago"],
    [3 * 86_400_000, "3 days ago"],
    [400 * 86_400_000, "1 year ago"],
  ])("ago(now - %d) = %s", (ms, text) => expect(ago(1_000_000_000_000 - ms, 1_000_000_000_000)).toBe(text));

  it.each([
    ["ai/smollm2", { repo: "ai/smollm2" }],
    ["ai/smollm2:v2", { repo: "ai/smollm2", tag: "v2" }],
    ["localhost:5000/ai/x", { repo: "localhost:5000/ai/x" }],
    ["localhost:5000/ai/x:q4", { repo: "localhost:5000/ai/x", tag: "q4" }],
  ])("splitTag(%s)", (reference, parts) => expect(splitTag(reference)).toEqual(parts));

  it("table: columns padded to the widest cell, no trailing spaces", () => {
    expect(table(["A", "LONG HEADER", "C"], [["wide cell", "x", ""], ["y", "z", "last"]])).toBe(
      ["A          LONG HEADER  C", "wide cell  x", "y          z            last"].join("\n"),
    );
    expect(shortId("sha256:0123456789abcdef")).toBe("0123456789ab");
  });

  it("printable: an answer keeps its text, newlines and tabs, but loses terminal controls", () => {
    expect(printable("a\tb\nc\x1b[2Jd\x07\r\x9be")).toBe("a\tb\nc[2Jde");
  });
});

describe("plain progress lines", () => {
  it("at most one line per layer per second, and always the line that completes it", () => {
    let now = 0;
    const out: string[] = [];
    const view = linesView((line) => out.push(line), () => now);
    const layer = { id: "sha256:aaaaaaaaaaaaffff", size: 2_000_000 };
    view.layer({ ...layer, current: 0 });
    now = 500;
    view.layer({ ...layer, current: 500_000 }); // too soon: skipped
    now = 1_000;
    view.layer({ ...layer, current: 1_000_000 });
    now = 1_100;
    view.layer({ ...layer, current: 2_000_000 }); // complete: always shown
    view.layer({ ...layer, current: 2_000_000 }); // once
    expect(out).toEqual(["aaaaaaaaaaaa: 0 B / 2.00 MB (0%)", "aaaaaaaaaaaa: 1.00 MB / 2.00 MB (50%)", "aaaaaaaaaaaa: 2.00 MB / 2.00 MB (100%) done"]);
  });
});

describe("where the command calls", () => {
  it.each([
    [{}, {}, { kind: "unix", path: expect.stringMatching(/\.llamadock\/model-runner\.sock$/) }],
    [{}, { MODEL_RUNNER_SOCK: "/s.sock" }, { kind: "unix", path: "/s.sock" }],
    [{}, { RUNNER_SOCKET: "/r.sock" }, { kind: "unix", path: "/r.sock" }],
    [{ socket: "/o.sock" }, { MODEL_RUNNER_SOCK: "/s.sock" }, { kind: "unix", path: "/o.sock" }],
    [{}, { MODEL_RUNNER_HOST: "http://h:1/" }, { kind: "tcp", url: "http://h:1" }],
    // A bare host is the server's listen address setting, not a URL for clients.
    [{}, { MODEL_RUNNER_HOST: "0.0.0.0", MODEL_RUNNER_SOCK: "/s.sock" }, { kind: "unix", path: "/s.sock" }],
    [{ host: "http://o:2" }, { MODEL_RUNNER_HOST: "http://h:1" }, { kind: "tcp", url: "http://o:2" }],
  ])("options %j, env %j", (options, env, target) => expect(targetOf(options, env)).toEqual(target));
});

describe("the runners' prompt caches in ps and fit", () => {
  const fit = (memory: Parameters<typeof caches>[0]) => describeFit({ fits: true, model: "ai/m", action: "load", alone: true, context_size: 4096, memory, beside: [], evicts: [], waits_for: [], budget: null });
  it("on a CPU, as a share of the total; beside a GPU, as host memory; none when off", () => {
    expect(fit({ where: "cpu", total_bytes: 3e9, prompt_cache_bytes: 1e9, checkpoints_bytes: 0, host_bytes: 0 })).toBe("ai/m fits alone: context 4096 tokens; 3.00 GB of memory; 1.00 GB of it prompt caches");
    expect(fit({ where: "gpu", total_bytes: 2e9, prompt_cache_bytes: 1e9, checkpoints_bytes: 5e8, host_bytes: 1.5e9 })).toBe("ai/m fits alone: context 4096 tokens; 2.00 GB of GPU memory; 1.50 GB of host memory for prompt caches");
    expect(fit({ where: "cpu", total_bytes: 2e9, prompt_cache_bytes: 0, checkpoints_bytes: 0, host_bytes: 0 })).toBe("ai/m fits alone: context 4096 tokens; 2.00 GB of memory");
    // A server that does not count them.
    expect(caches({ where: "cpu", total_bytes: 2e9 })).toBe("");
  });
});

import { setFlagsFromString } from "node:v8";

// How our server process asks Node's V8 to collect.

/**
 * Turns off V8's allocation-site pretenuring in a process that serves. V8 allocates an object made
 * at a site whose objects it saw survive straight in the old generation; a request's objects
 * live for one request, and the guess, once made (after 8000-10 000 whole completions in our runs),
 * stayed: each such object, dead soon after, held what it points at (the runner call, its socket,
 * its reader) through young collections, so that each one promoted 1.5 MB of streams' garbage and
 * the old generation filled every few thousand streams. Measured under Node, 3000 streams after
 * 10 000 whole completions: 1.4 MB promoted a young collection with it, 4 KB without, and V8's
 * worker threads 57 against 13 µs of CPU a stream. Set at start, before the server allocates.
 * Node only: Deno's run of the same gained nothing from the flag (its worker threads took 73-83 µs
 * a stream either way), and Bun's engine is JavaScriptCore.
 */
export function tuneV8ForServing(runtime: string): void {
  if (runtime === "node") setFlagsFromString("--no-allocation-site-pretenuring");
}

// What happened to the engines, newest last, kept in memory (GET /engines/builds/events; the last of them in the
// live state /engines/events streams) and logged: pulls,
// removals, a new default, and each loaded runner's move to another build (done, left for its next
// idle moment, or failed with the reason while the old build serves on).

export type EngineEvent = {
  at: string;
  kind: "pulled" | "pull_failed" | "removed" | "default" | "upgraded" | "retire_when_idle" | "upgrade_failed";
  engine: string;
  model?: string;
  message: string;
};

export type EngineEvents = { add(event: Omit<EngineEvent, "at">): void; list(): EngineEvent[] };

/** The last `kept` events. */
export function createEventLog(kept = 200, log: (line: string) => void = (line) => console.log(line)): EngineEvents {
  const events: EngineEvent[] = [];
  return {
    add(event) {
      events.push({ at: new Date().toISOString(), ...event });
      if (events.length > kept) events.splice(0, events.length - kept);
      const line = `engine ${event.kind}: ${event.model ? `${event.model}: ` : ""}${event.message}`;
      (event.kind.endsWith("failed") ? console.error : log)(line);
    },
    list: () => [...events],
  };
}

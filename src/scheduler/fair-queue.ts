import type { Lane } from "./types.ts";

// The requests waiting for a runner's slot, served in turn across callers (API keys): among the
// callers with a request waiting, the one served least recently goes next, each caller's own
// requests in the order they came. So a key that sends a hundred requests at once does not push
// another key's one request behind them: that one waits for at most one grant per other caller.
// Within one caller, its agent sessions take turns the same way (the session served least
// recently goes next), so one session's burst of requests does not hold another session of the
// same key behind it. Batch requests wait in a lane of their own, served only while no interactive request waits, and
// never take a runner's last free place (but on an idle runner): it is kept for interactive ones.
//
// While more than one caller has used the runner lately with interactive requests (`shared`):
// - a caller that holds an interactive place already never takes the last free one: it is kept for the others,
//   so that another caller's request starts at once instead of waiting for a slot to free (a
//   flood then runs on one slot fewer, until the others have been quiet for SHARED_WINDOW_MS);
// - nothing is handed to llama-server beyond its slots (the runner's `inFlightCap`): its own queue
//   (INFERENCE_RUNNER_QUEUE) is first come, first served, and what it holds cannot be reordered.
// Batch lines count for neither: they yield to every interactive request already, and a key whose
// batch holds a place must not find its own interactive request held back behind it.
// Sharing ends with no request to mark it: while an interactive request waits on a shared runner,
// a timer is armed for that moment, and the runner grants again then (see `watchSharing`).

export type Turn = { caller: string; lane: Lane; session?: string | undefined; prefix?: string | undefined; opening?: string | undefined };

/** A waiting request and the session it belongs to (within its caller's line). */
type Waiting<T> = { item: T; session: string | undefined };

/** The time, and a timer that `cancel`s; injected so that tests move time themselves. */
export type Clock = { now(): number; after(ms: number, then: () => void): () => void };

export const systemClock: Clock = {
  // Looked up at each call: a test's fake Date and timers replace the globals after this is built.
  now: () => Date.now(),
  after(ms, then) {
    const timer = setTimeout(then, ms);
    (timer as { unref?: () => void }).unref?.(); // the waiting request keeps the process up, not this
    return () => clearTimeout(timer);
  },
};

/** How long a caller counts as a user of the runner after its last request came. */
export const SHARED_WINDOW_MS = 10_000;

const LANES: Lane[] = ["interactive", "batch"];

export class FairQueue<T> {
  /** Per lane, each caller's waiting requests in order; a caller is present only while it has some. */
  private readonly lanes: Record<Lane, Map<string, Waiting<T>[]>> = { interactive: new Map(), batch: new Map() };
  /** Caller -> the grant number of its last grant (never served: absent, which goes first). */
  private readonly served = new Map<string, number>();
  /** Caller and session -> the grant number of the session's last grant (dropped with its caller's line). */
  private readonly sessionServed = new Map<string, number>();
  private grants = 0;
  /** Caller -> when it last asked for an interactive place. */
  private readonly seen = new Map<string, number>();
  /** Caller -> interactive places it holds (granted, not yet released). */
  private readonly held = new Map<string, number>();
  /** Places held, both lanes. */
  private holding = 0;
  #length = 0;

  private readonly clock: Clock;
  /** What grants the waiting requests (the runner's), run again when sharing ends. */
  private readonly regrant: () => void;
  /** The end of sharing the timer is armed for, and what cancels it; none while nothing is held back. */
  private watched: { until: number; cancel: () => void } | undefined;

  constructor({ clock = systemClock, regrant = () => {} }: { clock?: Clock; regrant?: () => void } = {}) {
    this.clock = clock;
    this.regrant = regrant;
  }

  private now(): number {
    return this.clock.now();
  }

  get length(): number {
    return this.#length;
  }

  /** A caller asks (whether it waits or not): with an interactive request it counts as a user of the runner for a while. */
  note(caller: string, lane: Lane = "interactive"): void {
    if (lane === "interactive") this.seen.set(caller, this.now());
  }

  /** Whether callers other than one used the runner within SHARED_WINDOW_MS. */
  shared(): boolean {
    // One caller (or none) seen: nothing to forget can make it shared (asked several times a request).
    if (this.seen.size <= 1) return false;
    const since = this.now() - SHARED_WINDOW_MS;
    for (const [caller, at] of this.seen) if (at < since) this.seen.delete(caller);
    return this.seen.size > 1;
  }

  /** When the runner stops being shared if nobody else asks: the second most recent caller's window ends. */
  sharedUntil(): number | undefined {
    if (!this.shared()) return undefined;
    let latest = -Infinity;
    let second = -Infinity;
    for (const at of this.seen.values()) {
      if (at > latest) [latest, second] = [at, latest];
      else if (at > second) second = at;
    }
    // shared() forgets a caller once the window lies strictly behind it.
    return second + SHARED_WINDOW_MS + 1;
  }

  /** Puts `item` at the end of its caller's line; the function returned takes it out again (false if it had gone). */
  push(item: T, { caller, lane, session }: Turn): () => boolean {
    const lines = this.lanes[lane];
    const line = lines.get(caller) ?? [];
    if (line.length === 0) lines.set(caller, line);
    line.push({ item, session });
    this.#length++;
    return () => {
      const at = line.findIndex((w) => w.item === item);
      if (at < 0) return false;
      line.splice(at, 1);
      if (line.length === 0 && lines.get(caller) === line) lines.delete(caller);
      this.#length--;
      if (this.lanes.interactive.size === 0) this.unwatch();
      return true;
    };
  }

  /** The lane whose turn it is: interactive while any waits, else batch; undefined when none waits. */
  nextLane(): Lane | undefined {
    for (const lane of LANES) if (this.lanes[lane].size > 0) return lane;
    return undefined;
  }

  /** Whether a request in `lane` would be served before every one waiting now. */
  wouldBeNext(lane: Lane): boolean {
    return this.#length === 0 || (lane === "interactive" && this.nextLane() === "batch");
  }

  /** Whether `caller` may take one of `free` places in `lane` (see the rules above; batch never takes the last but on an idle runner). */
  private mayTake(caller: string, free: number, lane: Lane): boolean {
    if (lane === "batch") return free > 1 || (free === 1 && this.holding === 0);
    return free > 1 || (free === 1 && ((this.held.get(caller) ?? 0) === 0 || !this.shared()));
  }

  private hold({ caller, lane }: Turn): void {
    this.holding++;
    if (lane === "interactive") this.held.set(caller, (this.held.get(caller) ?? 0) + 1);
  }

  /** A request that comes, granted at once (its place held) if it is next and may take one of `free` places. */
  takesNow({ caller, lane }: Turn, free: number): boolean {
    if (!this.wouldBeNext(lane) || !this.mayTake(caller, free, lane)) return false;
    this.hold({ caller, lane });
    return true;
  }

  /** A place of `caller` in `lane` was given back. */
  release(caller: string, lane: Lane = "interactive"): void {
    this.holding--;
    if (lane === "batch") return;
    const left = (this.held.get(caller) ?? 1) - 1;
    if (left > 0) this.held.set(caller, left);
    else this.held.delete(caller);
  }

  /**
   * Takes the next item, its place held, when one of `free` places may go to it: of the lane whose
   * turn it is, from the caller served least recently among those who may take a place now.
   */
  shift(free = 1): T | undefined {
    const lane = this.nextLane();
    if (!lane) return undefined;
    const lines = this.lanes[lane];
    let pick: string | undefined;
    for (const caller of lines.keys()) {
      if (!this.mayTake(caller, free, lane)) continue;
      if (pick === undefined || (this.served.get(caller) ?? -1) < (this.served.get(pick) ?? -1)) pick = caller;
    }
    if (pick === undefined) {
      this.watchSharing();
      return undefined;
    }
    this.hold({ caller: pick, lane });
    const line = lines.get(pick)!;
    const [{ item, session }] = line.splice(this.nextOfLine(pick, line), 1) as [Waiting<T>];
    if (line.length === 0) lines.delete(pick);
    this.#length--;
    this.served.set(pick, ++this.grants);
    if (session !== undefined) this.sessionServed.set(sessionName(pick, session), this.grants);
    if (!this.lanes.interactive.has(pick) && !this.lanes.batch.has(pick)) this.forgetSessions(pick);
    if (this.lanes.interactive.size === 0) this.unwatch();
    return item;
  }

  /** Where in `caller`'s line the next grant is: its session served least recently (no session: a session of its own), the first of ties. */
  private nextOfLine(caller: string, line: Waiting<T>[]): number {
    let at = 0;
    let atServed = Infinity;
    for (let i = 0; i < line.length; i++) {
      const session = line[i]!.session;
      const served = session === undefined ? -1 : (this.sessionServed.get(sessionName(caller, session)) ?? -1);
      if (served < atServed) [at, atServed] = [i, served];
      if (served === -1) break;
    }
    return at;
  }

  /** A caller with nothing waiting: its sessions' turns start afresh (the map holds only callers waiting). */
  private forgetSessions(caller: string): void {
    const prefix = sessionName(caller, "");
    for (const name of this.sessionServed.keys()) if (name.startsWith(prefix)) this.sessionServed.delete(name);
  }

  /**
   * Nothing more may be granted now. An interactive request held back while the runner is shared
   * (a place kept for others, none handed to llama-server's queue) may take a place once it is not,
   * and no request, release or load comes to say so: a timer does, for the moment sharing ends.
   * Without it the request waited, a slot free, until its caller's running request ended.
   */
  private watchSharing(): void {
    const until = this.nextLane() === "interactive" ? this.sharedUntil() : undefined;
    if (until === undefined) return this.unwatch();
    // The end only moves later as keys ask: a timer due sooner stays (one a window, not one a
    // request), and when it fires the grant finds the runner still shared and arms for the new end.
    if (this.watched && this.watched.until <= until) return;
    this.unwatch();
    const cancel = this.clock.after(until - this.now(), () => {
      this.watched = undefined;
      this.regrant();
    });
    this.watched = { until, cancel };
  }

  private unwatch(): void {
    this.watched?.cancel();
    this.watched = undefined;
  }

  /** Takes every item out (the runner failed them all). */
  clear(): T[] {
    const items: T[] = [];
    for (const lane of LANES) {
      for (const line of this.lanes[lane].values()) items.push(...line.map((w) => w.item));
      this.lanes[lane].clear();
    }
    this.sessionServed.clear();
    this.#length = 0;
    this.unwatch();
    return items;
  }
}

/** A session's name within its caller's (NUL: in neither a key's name nor a header). */
const sessionName = (caller: string, session: string) => `${caller}\u0000${session}`;

// Which of a runner's slots a granted request goes to (llama-server's `id_slot`), so that an agent
// session's turns land on the slot that holds its conversation, and sessions opened together over
// one long start (system prompt and tools) process it once between them.
//
// Why we choose rather than llama-server: it picks a free slot by the longest common prefix, which
// shared system prompts make ambiguous (every slot holding another session of the same agent looks
// alike), and it never shares a prefix between slots that are busy: K sessions opened at once each
// process the whole start. A slot named by `id_slot` is taken as it is (llama-server then neither
// looks for a better one nor consults its host prompt cache), so a slot is named only where its
// contents are known to be the session's, or are made so first (a copy: see `Placement`).
//
// Parking: with more sessions than slots, a slot given to one session holds another's
// conversation, which that session would process again on its next turn (llama-server does not
// restore a slot named by `id_slot` from its host prompt cache). So the displaced conversation is
// saved first (parked, under its session's name, which is per key), and a session whose slot was
// given away gets its parked conversation restored into the slot it is given (prefix-copies.ts).
// Parked files outlive the runner and are shared by every process on the store: one that stops parks
// the sessions still in its slots too, and a session parked elsewhere (by a runner before a restart or
// a reload, or by another replica of the pool) is looked up in the folder when it is placed
// (`recall`), and unparked the same way.
//
// Requests that name no session but have a start (a system prompt or tools: a script, LangChain, a
// small agent) are placed too, as anonymous conversations: clients opening together over one start
// process it once as sessions do, and a returning one goes back to the free slot whose conversation
// opened as its own did (`opening`: its start and first message). They take slots that hold no
// session's conversation before any that does, and are never parked themselves (nothing names them
// to come back for it); a session's conversation they displace is parked as any.
//
// Decisions are pure (`placement`, table-tested); `SlotTable` keeps the state they are made from,
// changed only by `place` and `release`, in the runner's single synchronous step of a grant.

/**
 * What the table knows of one slot: whose conversation it holds (a session's, or an anonymous one's
 * `opening`), the start it has, and whether a request runs on it.
 */
export type SlotState = { session?: string | undefined; prefix?: string | undefined; opening?: string | undefined; busy: boolean; usedAt: number };

/**
 * What a request brings: its session (with its key: names are per key), the digest of its prompt's
 * start, of its conversation's opening (a request naming no session), and whose leaders it may
 * wait for (its key's: another key's long answer never holds it).
 */
export type Ask = { session?: string | undefined; prefix?: string | undefined; opening?: string | undefined; group?: string | undefined };

/**
 * What goes with a slot given up (`take` and `follow`): `park`, the session whose conversation the
 * slot holds, saved before the request is sent; `unpark`, the request's session, whose slot was
 * given away (its conversation parked then): restored into the slot instead of a copy of its start.
 */
export type Moves = { park?: string; unpark?: string };

/**
 * Where a request goes:
 * - `any`: not named (no session, or none of its slots can be told): llama-server picks, as it always did;
 * - `own`: the slot that holds the session's conversation;
 * - `take`: a free slot the session's prompt is then processed in, from what the slot shares with
 *   it; `lead`: its start is new there, and sessions with the same start that come while it is
 *   processed follow it;
 * - `follow`: a slot into which a copy of slot `from` (which holds the same start) is restored
 *   before the request is sent: at once when `from` is free, else once its request has ended.
 */
export type Placement =
  | { kind: "any" }
  | { kind: "own"; slot: number }
  | ({ kind: "take"; slot: number; lead: boolean } & Moves)
  | ({ kind: "follow"; slot: number; from: number } & Moves);

/**
 * The placement of `ask` among `slots`, given the slot of a request now processing each group's
 * start (`leading`) and the sessions whose slots were given away (`parked`). A request that names
 * neither a session nor a start is left to llama-server. A session with its slot free goes back to
 * it; a session whose slot is busy (a side request of the same session) is left to llama-server; an
 * anonymous conversation goes back to the free slot where it opened. Any other gives up a slot
 * (`giveUp`). If that slot does not hold the request's start, the start is copied in from a free
 * slot that holds it, else from the request processing it (once that ends); with neither, the
 * request processes its start there itself, and leads. A slot given up that holds another
 * session's conversation parks it; a parked session unparks its own. (The copy of the start stays
 * in the placement: it is what is done when the unpark fails.)
 */
export function placement(slots: readonly SlotState[], ask: Ask, leading: ReadonlyMap<string, number>, parked: Pick<ReadonlySet<string>, "has"> = new Set()): Placement {
  if (ask.session === undefined && ask.prefix === undefined) return { kind: "any" };
  if (ask.session !== undefined) {
    const own = slots.findIndex((s) => s.session === ask.session);
    if (own >= 0) return slots[own]!.busy ? { kind: "any" } : { kind: "own", slot: own };
  }
  const free = slots.flatMap((s, i) => (s.busy ? [] : [i]));
  if (free.length === 0) return { kind: "any" };
  const leastUsed = (among: number[]) => among.reduce((a, b) => (slots[b]!.usedAt < slots[a]!.usedAt ? b : a));
  if (ask.session === undefined && ask.opening !== undefined) {
    const opened = free.filter((i) => slots[i]!.session === undefined && slots[i]!.opening === ask.opening && slots[i]!.prefix === ask.prefix);
    if (opened.length > 0) return { kind: "take", slot: leastUsed(opened), lead: false };
  }
  const slot = giveUp(slots, free, ask.prefix, leastUsed);
  const displaced = slots[slot]!.session;
  const moves: Moves = { ...(displaced !== undefined ? { park: displaced } : {}), ...(ask.session !== undefined && parked.has(ask.session) ? { unpark: ask.session } : {}) };
  if (ask.prefix === undefined) return { kind: "take", slot, lead: false, ...moves };
  if (slots[slot]!.prefix === ask.prefix) return { kind: "take", slot, lead: false, ...moves };
  const holding = free.filter((i) => slots[i]!.prefix === ask.prefix);
  if (holding.length > 0) return { kind: "follow", slot, from: leastUsed(holding), ...moves };
  const leader = leading.get(ask.group ?? ask.prefix);
  if (leader !== undefined) return { kind: "follow", slot, from: leader, ...moves };
  return { kind: "take", slot, lead: true, ...moves };
}

/**
 * The free slot a request gives up: an empty one; else one holding no session's conversation (its
 * start first, then the least recently used), so that no session's is parked while such a slot is
 * free; else the least recently used, whose session is parked.
 */
function giveUp(slots: readonly SlotState[], free: number[], prefix: string | undefined, leastUsed: (among: number[]) => number): number {
  const empty = free.filter((i) => slots[i]!.session === undefined && slots[i]!.prefix === undefined);
  if (empty.length > 0) return empty[0]!;
  const anonymous = free.filter((i) => slots[i]!.session === undefined);
  const holding = anonymous.filter((i) => prefix !== undefined && slots[i]!.prefix === prefix);
  if (holding.length > 0) return leastUsed(holding);
  return leastUsed(anonymous.length > 0 ? anonymous : free);
}

/** Sessions remembered as parked per runner: past this, the longest parked is forgotten (its file ages out of the folder, unless a later runner finds it). */
export const MAX_PARKED_SESSIONS = 1024;

/** The slots of one runner as its grants and releases leave them. */
export class SlotTable {
  private readonly slots: SlotState[];
  /** Group (see Ask) -> the slot of the request processing its start for others to follow (until it ends). */
  private readonly leading = new Map<string, number>();
  /** Slot -> the group its leader leads. */
  private readonly leads = new Map<number, string>();
  /** Sessions whose slot was given away, longest parked first (a Set keeps insertion order). */
  private readonly parked = new Set<string>();
  /** Sessions parked elsewhere (before this runner loaded, or by another process on the store), as the slot-cache folder holds them. */
  private parkedElsewhere: (session: string) => boolean = () => false;

  constructor(count: number) {
    this.slots = Array.from({ length: count }, () => ({ busy: false, usedAt: 0 }));
  }

  /** Sessions parked by another runner of the same model and settings (earlier, or a replica's) are parked here too. */
  recall(parkedElsewhere: (session: string) => boolean): void {
    this.parkedElsewhere = parkedElsewhere;
  }

  /** Places a request and marks its slot busy; the slot now holds the session's conversation. */
  place(ask: Ask, now: number): Placement {
    const parked = { has: (session: string) => this.parked.has(session) || this.parkedElsewhere(session) };
    const where = placement(this.slots, ask, this.leading, parked);
    if (where.kind === "any") return where;
    if (where.kind !== "own") this.moved(ask.session, where);
    // A session moved: the slot it held is no longer its own (its conversation is overwritten there in time).
    if (ask.session !== undefined) for (const s of this.slots) if (s.session === ask.session) s.session = undefined;
    this.slots[where.slot] = { session: ask.session, prefix: ask.prefix, opening: ask.session === undefined ? ask.opening : undefined, busy: true, usedAt: now };
    if (where.kind === "take" && where.lead) {
      const group = ask.group ?? ask.prefix!;
      this.leading.set(group, where.slot);
      this.leads.set(where.slot, group);
    }
    return where;
  }

  /** Keeps which sessions are parked: the displaced one now is, the placed one (if it is one) no longer. */
  private moved(session: string | undefined, where: Moves): void {
    if (session !== undefined) this.parked.delete(session);
    if (where.park === undefined) return;
    this.parked.delete(where.park);
    this.parked.add(where.park);
    if (this.parked.size > MAX_PARKED_SESSIONS) this.parked.delete(this.parked.values().next().value!);
  }

  /** A placed request ended: its slot is free, and a start it was processing for others is theirs to copy. */
  release(where: Placement, now: number): void {
    if (where.kind === "any") return;
    const slot = this.slots[where.slot]!;
    slot.busy = false;
    slot.usedAt = now;
    const group = this.leads.get(where.slot);
    if (group !== undefined && this.leading.get(group) === where.slot) this.leading.delete(group);
    this.leads.delete(where.slot);
  }

  /** Whether a placed request holds a slot (a loop, not `some` with a callback: asked at every grant). */
  anyBusy(): boolean {
    for (const slot of this.slots) if (slot.busy) return true;
    return false;
  }

  /** The state, for views and tests. */
  view(): readonly Readonly<SlotState>[] {
    return this.slots;
  }

  /** The sessions whose slot this table gave away, longest parked first (those parked elsewhere are the folder's). */
  parkedSessions(): string[] {
    return [...this.parked];
  }
}

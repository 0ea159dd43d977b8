import { describe, expect, it } from "vitest";
import { placement, SlotTable, type Placement, type SlotState } from "../../src/scheduler/affinity.ts";

// The slot a granted request goes to, as a table: the slots as they are (`session@prefix`, an
// anonymous conversation as `@prefix#opening`, `*` when a request runs there, `.` for an empty
// slot; a number after `~` is when it was last used), the request (`session@prefix`,
// `@prefix#opening`), the starts being processed for others, the sessions whose slots were given
// away (parked), and the placement.

function parse(text: string) {
  const [named, opening] = text.split("#");
  const [session, prefix] = named!.split("@");
  return { session: session || undefined, prefix: prefix || undefined, ...(opening ? { opening } : {}) };
}

function slotsOf(text: string): SlotState[] {
  return text.split(" ").map((cell) => {
    const busy = cell.includes("*");
    const [name, used] = cell.replace("*", "").split("~");
    if (name === ".") return { busy, usedAt: Number(used ?? 0) };
    return { ...parse(name!), busy, usedAt: Number(used ?? 0) };
  });
}

const ask = parse;

describe("placing a request on a slot", () => {
  it.each<[string, string, string, Record<string, number>, Placement, string[]?]>([
    ["neither a session nor a start (a bare completion): llama-server picks, as before", ". .", "", {}, { kind: "any" }],
    ["a session goes back to its slot when it is free", "a@p~1 b@p~2", "b@p", {}, { kind: "own", slot: 1 }],
    ["its slot busy (a side request of the same session): left to llama-server", "a@p* .", "a@p", {}, { kind: "any" }],
    ["a new session gets an empty slot and a copy of a free slot holding its start", "a@p~5 b@p~2 .", "c@p", {}, { kind: "follow", slot: 2, from: 1 }],
    ["a new session follows the request processing its start, into an empty slot", "a@p* . .", "c@p", { p: 0 }, { kind: "follow", slot: 1, from: 0 }],
    ["a free slot holding its start is copied rather than a running one waited for", "a@p* b@p~1 .", "c@p", { p: 0 }, { kind: "follow", slot: 2, from: 1 }],
    ["no empty slot: the least recently used is given up, and the leader followed into it", "a@p* b@q~3 c@q~1", "d@p", { p: 0 }, { kind: "follow", slot: 2, from: 0, park: "c" }],
    ["no empty slot: the least recently used, taken as it is when it holds the start", "a@p~5 b@p~2", "c@p", {}, { kind: "take", slot: 1, lead: false, park: "b" }],
    ["no empty slot: the least recently used, with a copy of the start from another free slot", "a@p~5 b@q~2", "c@p", {}, { kind: "follow", slot: 1, from: 0, park: "b" }],
    ["a new start leads in an empty slot (others with it will follow)", "a@q~1 .", "c@p", {}, { kind: "take", slot: 1, lead: true }],
    ["a new start with no empty slot takes the least recently used", "a@q~4 b@q~2", "c@p", {}, { kind: "take", slot: 1, lead: true, park: "b" }],
    ["no start (a bare completion): never leads, never follows", "a@p* .", "c", { p: 0 }, { kind: "take", slot: 1, lead: false }],
    ["every slot busy (requests in llama-server's own queue): left to it", "a@p* b@p*", "c@p", {}, { kind: "any" }],
    // Parking: more sessions than slots.
    ["a slot whose session moved on holds no one's conversation: nothing parked", "@p~1 b@p~2", "c@p", {}, { kind: "take", slot: 0, lead: false }],
    ["a parked session coming back unparks into the least recently used slot, parking its holder", "a@p~5 b@p~2", "c@p", {}, { kind: "take", slot: 1, lead: false, park: "b", unpark: "c" }, ["c"]],
    ["a parked session unparks into an empty slot: nothing to park", "a@p~5 .", "c@p", {}, { kind: "follow", slot: 1, from: 0, unpark: "c" }, ["c"]],
    ["a parked session keeps the copy of its start it would get, for when its unpark fails", "a@p* b@q~2", "c@p", { p: 0 }, { kind: "follow", slot: 1, from: 0, park: "b", unpark: "c" }, ["c", "d"]],
    ["another session parked changes nothing for this one", "a@p~5 b@p~2", "c@p", {}, { kind: "take", slot: 1, lead: false, park: "b" }, ["d"]],
    ["a parked session whose slot is free again (a side request came between) just goes back", "a@p~5 c@p~2", "c@p", {}, { kind: "own", slot: 1 }, ["c"]],
    ["no slot free: left to llama-server, parked or not", "a@p* b@p*", "c@p", {}, { kind: "any" }, ["c"]],
    // Anonymous conversations: a start, no session.
    ["an anonymous conversation with a new start leads in an empty slot", "a@q~1 .", "@p#o1", {}, { kind: "take", slot: 1, lead: true }],
    ["anonymous clients opening together over one start follow the first", "@p#o1* . .", "@p#o2", { p: 0 }, { kind: "follow", slot: 1, from: 0 }],
    ["an anonymous conversation goes back to the free slot where it opened", "@p#o1~1 @p#o2~2 @p#o3~3", "@p#o2", {}, { kind: "take", slot: 1, lead: false }],
    ["...not to its slot while it is busy: another, with the start", "@p#o1~1 @p#o2* .", "@p#o2", {}, { kind: "follow", slot: 2, from: 0 }],
    ["a session's slot is not taken while one holding no session's conversation is free", "a@p~1 @q#o~5", "@p#x", {}, { kind: "follow", slot: 1, from: 0 }],
    ["a new session takes a slot holding its start and no session's conversation: nothing parked, nothing copied", "a@p~1 @p#o~5", "b@p", {}, { kind: "take", slot: 1, lead: false }],
    ["every free slot holds a session's conversation: the least recently used is parked", "a@p~1 b@p~5", "@p#o", {}, { kind: "take", slot: 0, lead: false, park: "a" }],
    ["a session never goes to an anonymous conversation's slot by its opening", "@p#b~1 .", "b@p", {}, { kind: "follow", slot: 1, from: 0 }],
  ])("%s", (_story, slots, request, leading, expected, parked = []) => {
    expect(placement(slotsOf(slots), ask(request), new Map(Object.entries(leading)), new Set(parked))).toEqual(expected);
  });
});

describe("the slot table", () => {
  it("K sessions opened together over one start: the first leads, the others follow it until it ends", () => {
    const table = new SlotTable(3);
    expect(table.place({ session: "a", prefix: "p" }, 1)).toEqual({ kind: "take", slot: 0, lead: true });
    expect(table.place({ session: "b", prefix: "p" }, 2)).toEqual({ kind: "follow", slot: 1, from: 0 });
    expect(table.place({ session: "c", prefix: "p" }, 3)).toEqual({ kind: "follow", slot: 2, from: 0 });
    table.release({ kind: "take", slot: 0, lead: true }, 4);
    table.release({ kind: "follow", slot: 1, from: 0 }, 5);
    table.release({ kind: "follow", slot: 2, from: 0 }, 6);
    // Their second turns: each on its own slot.
    expect(["a", "b", "c"].map((session) => table.place({ session, prefix: "p" }, 7))).toEqual([0, 1, 2].map((slot) => ({ kind: "own", slot })));
  });

  it("a request waits only for a leader of its own group (its key's)", () => {
    const table = new SlotTable(3);
    table.place({ session: "a", prefix: "p", group: "k1" }, 1);
    expect(table.place({ session: "b", prefix: "p", group: "k2" }, 2)).toEqual({ kind: "take", slot: 1, lead: true });
    expect(table.place({ session: "c", prefix: "p", group: "k1" }, 3)).toEqual({ kind: "follow", slot: 2, from: 0 });
  });

  it("once its leader ended, a start is copied from the leader's slot, now free", () => {
    const table = new SlotTable(2);
    const lead = table.place({ session: "a", prefix: "p" }, 1);
    table.release(lead, 2);
    expect(table.place({ session: "b", prefix: "p" }, 3)).toEqual({ kind: "follow", slot: 1, from: 0 });
  });

  it("a session that moved no longer owns its old slot; the one that took it does", () => {
    const table = new SlotTable(2);
    table.release(table.place({ session: "a", prefix: "p" }, 1), 1);
    table.release(table.place({ session: "b", prefix: "p" }, 2), 2);
    table.release(table.place({ session: "c", prefix: "p" }, 3), 3); // no empty slot: takes a's, the least recently used
    expect(table.view().map((s) => s.session)).toEqual(["c", "b"]);
    expect(table.place({ session: "a", prefix: "p" }, 4)).toEqual({ kind: "take", slot: 1, lead: false, park: "b", unpark: "a" });
  });

  it("K = 2x the slots, two turns each: every displaced session is parked, and unparked when it comes back", () => {
    const table = new SlotTable(2);
    const turn = (session: string, now: number) => {
      const where = table.place({ session, prefix: "p" }, now);
      table.release(where, now);
      return where;
    };
    const first = ["a", "b", "c", "d"].map((s, i) => turn(s, i + 1));
    expect(first.map((w) => ("park" in w ? w.park : undefined))).toEqual([undefined, undefined, "a", "b"]);
    // Second turns, in the same order: each unparks its own conversation and parks the slot's holder.
    const second = ["a", "b", "c", "d"].map((s, i) => turn(s, i + 5));
    expect(second).toEqual([
      { kind: "take", slot: 0, lead: false, park: "c", unpark: "a" },
      { kind: "take", slot: 1, lead: false, park: "d", unpark: "b" },
      { kind: "take", slot: 0, lead: false, park: "a", unpark: "c" },
      { kind: "take", slot: 1, lead: false, park: "b", unpark: "d" },
    ]);
  });

  it("a session parked before the runner loaded (a restart, a reload) unparks where it is placed; others do not", () => {
    const table = new SlotTable(2);
    table.recall((session) => session === "a");
    expect(table.place({ session: "b", prefix: "p" }, 1)).toEqual({ kind: "take", slot: 0, lead: true });
    expect(table.place({ session: "a", prefix: "p" }, 2)).toEqual({ kind: "follow", slot: 1, from: 0, unpark: "a" });
  });

  it("a session placed again is no longer parked: its next move onto another slot copies, not unparks", () => {
    const table = new SlotTable(1);
    table.release(table.place({ session: "a", prefix: "p" }, 1), 1);
    table.release(table.place({ session: "b", prefix: "p" }, 2), 2);
    expect(table.place({ session: "a", prefix: "p" }, 3)).toEqual({ kind: "take", slot: 0, lead: false, park: "b", unpark: "a" });
    table.release({ kind: "take", slot: 0, lead: false }, 3);
    expect(table.place({ session: "a", prefix: "p" }, 4)).toEqual({ kind: "own", slot: 0 });
  });
});

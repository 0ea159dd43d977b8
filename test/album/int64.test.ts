import { describe, expect, it } from "vitest";
import * as z from "zod";
import { Int64Json, int64Param, parseJsonWithExactIds } from "../../src/album/int64.ts";
import { parsePhotos } from "../../src/album/photos.ts";

// Reading ids exactly, on the exact path alone and through the photo client's parse, whose fast
// path (plain JSON.parse and the compiled schema) must never accept what the exact path would read
// differently.

const Ids = z.array(z.object({ id: Int64Json }));
const exactIdsOf = (text: string) => {
  const parsed = Ids.safeParse(parseJsonWithExactIds(text));
  return parsed.success ? JSON.stringify(parsed.data.map((p) => p.id)) : "rejected";
};
/** The same ids, each object given the photo's other fields, through the photo client. */
const photoIdsOf = (text: string) => {
  try {
    return JSON.stringify(parsePhotos(text.replaceAll("{", '{"title":null,"url":"u","thumbnailUrl":"t",')).map((p) => p.id));
  } catch {
    return "rejected";
  }
};

describe.each([
  ["parseJsonWithExactIds + Int64Json", exactIdsOf],
  ["parsePhotos", photoIdsOf],
])("%s", (_name, idsOf) => {
  it.each([
    ['[{"id":1},{"id":-2},{"id":0}]', "[1,-2,0]"],
    ['[{"id":-0}]', "[0]"],
    ['[{"id":9007199254740991}]', "[9007199254740991]"],
    ['[{"id":9007199254740993},{"id":1}]', "[9007199254740993,1]"],
    ['[{"id":-9223372036854775808},{"id":9223372036854775807}]', "[-9223372036854775808,9223372036854775807]"],
    ['[{"id" :\n 9007199254740993}]', "[9007199254740993]"],
    ['[{"\\u0069d":9007199254740993}]', "[9007199254740993]"],
    ['[{"title":"\\"id\\":1.5","id":2}]', "[2]"],
    ['[{"title":"id","id":3}]', "[3]"],
    // An integer by its value, as JSON Schema's integer; a fraction within a double's precision is lost.
    ['[{"id":1.0},{"id":1e3},{"id":-2E1},{"\\u0069d":4.00}]', "[1,1000,-20,4]"],
    ['[{"id":1.0},{"id":9007199254740993}]', "[1,9007199254740993]"],
    ['[{"id" : 1.0000000000000001}]', "[1]"],
  ])("reads %s as %s", (text, ids) => {
    expect(idsOf(text)).toBe(ids);
  });

  it.each([
    '[{"id":1.5}]',
    '[{"id":1.5},{"id":9007199254740993}]',
    // Past 2^53 only digits are read exactly.
    '[{"id":9007199254740993.0}]',
    '[{"id":1e20}]',
    '[{"id":9223372036854775808}]',
    '[{"id":-9223372036854775809}]',
    '[{"id":"1"}]',
    '[{"id":null}]',
  ])("rejects %s", (text) => {
    expect(idsOf(text)).toBe("rejected");
  });
});

describe("int64Param", () => {
  it.each([
    ["1", "1"],
    ["0", "0"],
    ["-42", "-42"],
    ["123456789012345678", "123456789012345678"],
    ["+5", "5"],
    ["007", "7"],
    ["-0", "0"],
    ["9223372036854775807", "9223372036854775807"],
    ["-9223372036854775808", "-9223372036854775808"],
    ["9223372036854775808", undefined],
    ["-9223372036854775809", undefined],
    ["", undefined],
    ["1.5", undefined],
    ["abc", undefined],
    ["--1", undefined],
  ])("%j -> %j", (text, expected) => {
    expect(int64Param(text)).toBe(expected);
  });
});

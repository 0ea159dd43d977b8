import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { GENERATED, photoValidatorSource } from "../../scripts/photo-validator.ts";

// The album's photo validator is Ajv's output, generated ahead of time: the file in the tree must
// be what Ajv writes for the schema today (run `npm run gen:validator` after changing either).

describe("the generated photo validator", () => {
  it("is Ajv's code for photo-schema.ts as it is now", () => {
    expect(readFileSync(GENERATED, "utf8")).toBe(photoValidatorSource());
  });
});

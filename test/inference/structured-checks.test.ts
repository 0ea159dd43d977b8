import { describe, expect, it } from "vitest";
import { textFormatFields } from "../../src/dialects/responses-format.ts";
import { HttpError } from "../../src/http/errors.ts";
import { hangingRepetition, patternVerdict } from "../../src/inference/grammar-pattern.ts";
import { schemaProblem } from "../../src/inference/json-schema.ts";
import { structuredRequest } from "../../src/inference/structured.ts";

// What llama-server v0.5.0 can hold an answer to, judged before a request reaches it (each refused
// shape was run against the real binary: see the comments in src/inference/json-schema.ts), and
// the translations that make it obey a named tool_choice and the Responses API's text.format.

describe("patterns", () => {
  it.each([
    ["^[a-z]{1,8}$", "ok"],
    ["^(?:ab|cd)+x?$", "ok"],
    ["^\\x41\\u00e9[\\-\\]]\\.$", "ok"],
    ["^a{3}b{2,}c{,4}$", "ok"],
    ["[a-z]+", "unsupported"], // not anchored: llama-server accepts any string
    ["^\\d{3}$", "unsupported"],
    ["^(?=a)b$", "unsupported"],
    ["^a^b$", "unsupported"],
    ["^[\\w]$", "unsupported"],
    ["^(a$", "invalid"],
    ["^*a$", "invalid"],
    ["^[ab$", "invalid"],
    ["^a{2,1}$", "hang"], // llama-server loops, its memory growing
    ["^(ab){9,3}$", "hang"],
  ])("%s: %s", (pattern, kind) => {
    expect(patternVerdict(pattern).kind).toBe(kind);
  });

  it.each([
    ['root ::= "a"{2,1}', "{2,1}"],
    ['root ::= "a" { 5 , 2 }', "{ 5 , 2 }"],
    ['root ::= "a"{1,2} [x]{0,3}', undefined],
    ['root ::= "{5,2}" [{9,1}] # {3,1}\n', undefined],
  ])("a grammar: %s", (grammar, found) => {
    expect(hangingRepetition(grammar)).toBe(found);
  });
});

describe("schemas", () => {
  const object = (properties: Record<string, unknown>) => ({ type: "object", properties, required: Object.keys(properties), additionalProperties: false });
  it.each([
    [object({ color: { type: "string", enum: ["red", "blue"] }, word: { type: "string", maxLength: 8 } }), true, undefined],
    [object({ n: { type: "integer", minimum: 0, maximum: 9 }, at: { type: "string", format: "date-time" } }), true, undefined],
    [{ $defs: { a: { type: "string" } }, type: "array", items: { $ref: "#/$defs/a" }, minItems: 1, maxItems: 3 }, true, undefined],
    [{ $defs: { node: { type: "object", properties: { next: { $ref: "#/$defs/node" } } } }, $ref: "#/$defs/node" }, true, undefined], // recursive: fine
    [{ anyOf: [{ type: "null" }, { type: "string", pattern: "^[a-z]+$" }] }, true, undefined],
    [{ type: "string", minLength: 5, maxLength: 2 }, false, "#: minLength 5 is above maxLength 2 (llama-server would hang on it)"],
    [object({ s: { type: "string", pattern: "^a{2,1}$" } }), false, "#/properties/s: pattern ^a{2,1}$: repetition {2,1} has a minimum above its maximum (llama-server would hang on it)"],
    [{ type: "integer", minimum: 1.5, maximum: 1.7 }, false, "#: no integer lies within its bounds"],
    [{ type: "integer", exclusiveMinimum: 5, exclusiveMaximum: 5 }, false, "#: no integer lies within its bounds"],
    [{ type: "number", minimum: 5, maximum: 1 }, false, "#: no number lies within its bounds"],
    [{ type: "array", minItems: 3, maxItems: 1 }, false, "#: minItems 3 is above maxItems 1"],
    ["not a schema", false, "#: a schema must be an object"],
    [{ type: "foo" }, false, '#: unknown type "foo"'],
    [{ $ref: "https://example.com/s.json" }, false, '#: unsupported $ref "https://example.com/s.json": only references into the same document ("#/...") are'],
    [{ $ref: "#/definitions/missing" }, false, "#: cannot resolve $ref #/definitions/missing"],
    [{ enum: [] }, false, "#: enum must be a non-empty array"],
    [{ type: "object", additionalProperties: "no" }, false, "#: additionalProperties must be a boolean or a schema"],
    [{ anyOf: [] }, false, "#/anyOf: must be a non-empty array of schemas"],
    [{ type: "string", pattern: "^(a$" }, false, "#: pattern ^(a$ is not a valid regular expression: unbalanced parentheses"],
    // Constraints llama-server would drop: refused when strict, let through (best effort) when not.
    [{ type: "string", pattern: "^\\d+$" }, false, undefined],
    [{ type: "string", pattern: "^\\d+$" }, true, "#: llama-server cannot enforce pattern ^\\d+$: the escape \\d (send strict: false to have it ignored)"],
    [{ type: "string", format: "email" }, true, "#: llama-server does not enforce format email (it does date, time, date-time and uuid; send strict: false to have it ignored)"],
    [{ type: "number", minimum: 0 }, true, "#: llama-server does not enforce minimum on a number, only on an integer (send strict: false to have it ignored)"],
    [{ type: "array", items: { type: "string" }, uniqueItems: true }, true, "#: llama-server does not enforce uniqueItems (send strict: false to have it ignored)"],
    [{ type: "array", items: { type: "string" }, uniqueItems: true }, false, undefined],
  ])("%j (strict %s): %s", (schema, strict, expected) => {
    const problem = schemaProblem(schema, strict);
    expect(problem ? `${problem.path}: ${problem.message}` : undefined).toBe(expected);
  });

  it("refuses a schema nested past its depth rather than walking it", () => {
    let deep: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 100; i++) deep = { type: "array", items: deep };
    expect(schemaProblem(deep, false)?.message).toMatch(/nested deeper than/);
  });
});

describe("a request's schemas, grammar and named tool", () => {
  const refusal = (endpoint: Parameters<typeof structuredRequest>[0], body: unknown) => {
    try {
      structuredRequest(endpoint, body);
      return undefined;
    } catch (error) {
      expect(error).toBeInstanceOf(HttpError);
      return `${(error as HttpError).status} ${(error as HttpError).code}: ${(error as HttpError).message}`;
    }
  };
  const hangs = { type: "string", minLength: 3, maxLength: 1 };

  it.each([
    ["chat/completions", { response_format: { type: "json_schema", json_schema: { name: "r", schema: hangs } } }, "response_format.json_schema.schema"],
    ["chat/completions", { response_format: { type: "json_object", schema: hangs } }, "response_format.schema"],
    ["completions", { json_schema: hangs }, "json_schema"],
    ["chat/completions", { tools: [{ type: "function", function: { name: "f", parameters: hangs } }] }, "tools[0].function.parameters"],
    ["responses", { tools: [{ type: "function", name: "f", parameters: hangs }] }, "tools[0].parameters"],
  ] as const)("%s: the schema at %j is checked", (endpoint, body, where) => {
    expect(refusal(endpoint, body)).toBe(`400 invalid_schema: ${where}: minLength 3 is above maxLength 1 (llama-server would hang on it) (at #)`);
  });

  it("checks strictness where the request asks for it", () => {
    const email = { type: "object", properties: { to: { type: "string", format: "email" } } };
    const chat = (strict: boolean) => ({ response_format: { type: "json_schema", json_schema: { name: "r", strict, schema: email } } });
    expect(refusal("chat/completions", chat(true))).toMatch(/^400 invalid_schema: .*format email/);
    expect(refusal("chat/completions", chat(false))).toBeUndefined();
    expect(refusal("chat/completions", { tools: [{ type: "function", function: { name: "f", strict: true, parameters: email } }] })).toMatch(/format email/);
  });

  it("refuses a raw grammar that would hang llama-server", () => {
    expect(refusal("completions", { grammar: 'root ::= "x"{4,2}' })).toBe("400 invalid_grammar: grammar: the repetition {4,2} has a minimum above its maximum");
  });

  const weather = { type: "function", function: { name: "weather", parameters: { type: "object" } } };
  const time = { type: "function", function: { name: "time", parameters: { type: "object" } } };
  it.each([
    ["chat/completions", { tools: [weather, time], tool_choice: { type: "function", function: { name: "time" } } }, { tools: [time], tool_choice: "required" }],
    ["responses", { tools: [{ type: "function", name: "a" }, { type: "function", name: "b" }], tool_choice: { type: "function", name: "b" } }, { tools: [{ type: "function", name: "b" }], tool_choice: "required" }],
  ] as const)("%s: a named tool_choice offers that tool alone and requires a call", (endpoint, body, expected) => {
    expect(structuredRequest(endpoint, body)).toEqual(expected);
  });

  it("leaves every other body as it is (the same object: nothing is re-encoded)", () => {
    const bodies = [{ model: "m", messages: [] }, { tools: [weather], tool_choice: "required" }, { tools: [weather], tool_choice: "auto" }, [1, 2], "x"];
    for (const body of bodies) expect(structuredRequest("chat/completions", body)).toBe(body);
  });

  it("refuses a named tool that is not among the tools", () => {
    expect(refusal("chat/completions", { tools: [weather], tool_choice: { type: "function", function: { name: "nope" } } })).toBe(
      '400 invalid_tool_choice: tool_choice names the function "nope", which is not among the tools',
    );
  });
});

describe("the Responses API's text.format", () => {
  it.each([
    [{ text: { format: { type: "json_schema", name: "r", strict: true, schema: { type: "object" } } } }, { response_format: { type: "json_schema", json_schema: { name: "r", strict: true, schema: { type: "object" } } } }],
    [{ text: { format: { type: "json_object" } } }, { response_format: { type: "json_object" } }],
    [{ text: { format: { type: "text" } } }, {}],
    [{ text: { verbosity: "low" } }, {}],
    [{}, {}],
  ])("%j", (body, fields) => {
    expect(textFormatFields(body)).toEqual(fields);
  });
});

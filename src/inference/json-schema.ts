import { patternVerdict } from "./grammar-pattern.ts";

// Whether llama-server (v0.5.0) can turn a JSON schema into a grammar that holds its answer to it,
// checked before the request reaches it. Pure: a schema in, the first problem (or none) out.
//
// What it was seen to do with schemas it cannot use, and why each is refused here:
// - a string's minLength above its maxLength, or a pattern's {m,n} with m > n: its grammar builder
//   loops, its memory growing by tens of MB a second, deaf to SIGTERM;
// - an integer range that holds no integer: 500 "Unexpected empty grammar stack";
// - bounds that no value meets (minItems > maxItems, minimum > maximum): an answer that breaks them;
// - no object, an unknown type, a $ref out of the document, an empty enum or anyOf: its 400 says
//   "Unable to generate parser for this template", which names the wrong culprit.
// With `strict` (OpenAI's flag, which the Vercel AI SDK sets), also what it would not enforce and
// would answer unconstrained: a pattern outside its subset (\d, lookaround, no ^...$; its log says
// "accepting any string"), a format other than date, time, date-time and uuid, a number's bounds,
// and the keywords it ignores. Without `strict` those pass, as OpenAI's own best effort does.

export type SchemaProblem = { path: string; message: string };

const TYPES = new Set(["null", "boolean", "number", "integer", "string", "array", "object"]);
const FORMATS = new Set(["date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"]);
/** Validation keywords its converter reads nowhere. */
const IGNORED = [
  "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "uniqueItems", "contains", "minContains",
  "maxContains", "minProperties", "maxProperties", "patternProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "multipleOf",
];
const NUMBER_BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
/** Deeper than this is refused rather than walked (a body may nest as deep as its size allows). */
const MAX_DEPTH = 64;

type Node = Record<string, unknown>;
type Walk = { root: unknown; strict: boolean; seen: Set<unknown> };

class Problem extends Error {
  readonly path: string;
  constructor(path: string, message: string) {
    super(message);
    this.path = path;
  }
}

const isObject = (value: unknown): value is Node => typeof value === "object" && value !== null && !Array.isArray(value);
const isCount = (value: unknown) => Number.isInteger(value) && (value as number) >= 0;

/** The first reason llama-server cannot hold an answer to `schema`, or undefined. */
export function schemaProblem(schema: unknown, strict: boolean): SchemaProblem | undefined {
  try {
    visit(schema, "#", { root: schema, strict, seen: new Set() }, 0);
    return undefined;
  } catch (error) {
    if (error instanceof Problem) return { path: error.path, message: error.message };
    throw error;
  }
}

function visit(node: unknown, path: string, walk: Walk, depth: number): void {
  if (depth > MAX_DEPTH) throw new Problem(path, `nested deeper than ${MAX_DEPTH} levels`);
  if (!isObject(node)) throw new Problem(path, "a schema must be an object");
  if (walk.seen.has(node)) return; // a $ref cycle, or a definition met twice
  walk.seen.add(node);
  const next = (child: unknown, at: string) => visit(child, at, walk, depth + 1);
  if ("$ref" in node) return next(resolve(node.$ref, path, walk.root), String(node.$ref));
  for (const key of ["anyOf", "oneOf", "allOf"]) {
    if (!(key in node)) continue;
    const alternatives = node[key];
    if (!Array.isArray(alternatives) || alternatives.length === 0) throw new Problem(`${path}/${key}`, "must be a non-empty array of schemas");
    alternatives.forEach((child, i) => next(child, `${path}/${key}/${i}`));
  }
  if ("enum" in node && (!Array.isArray(node.enum) || node.enum.length === 0)) throw new Problem(path, "enum must be a non-empty array");
  for (const type of types(node, path)) checkType(type, node, path, walk.strict);
  if (walk.strict) {
    const ignored = IGNORED.find((key) => key in node);
    if (ignored) throw new Problem(path, `llama-server does not enforce ${ignored} (send strict: false to have it ignored)`);
  }
  if (isObject(node.properties)) for (const [name, child] of Object.entries(node.properties)) next(child, `${path}/properties/${name}`);
  else if ("properties" in node) throw new Problem(path, "properties must be an object");
  if (isObject(node.additionalProperties)) next(node.additionalProperties, `${path}/additionalProperties`);
  else if ("additionalProperties" in node && typeof node.additionalProperties !== "boolean") throw new Problem(path, "additionalProperties must be a boolean or a schema");
  for (const key of ["items", "prefixItems"]) {
    const items = node[key];
    if (Array.isArray(items)) items.forEach((child, i) => next(child, `${path}/${key}/${i}`));
    else if (items !== undefined && typeof items !== "boolean") next(items, `${path}/${key}`);
  }
}

/** The target of a `$ref`: only `#/...` into the same document, as llama-server resolves them. */
function resolve(ref: unknown, path: string, root: unknown): unknown {
  if (typeof ref !== "string" || !ref.startsWith("#/")) throw new Problem(path, `unsupported $ref ${JSON.stringify(ref)}: only references into the same document ("#/...") are`);
  let target: unknown = root;
  for (const step of ref.slice(2).split("/")) {
    const key = step.replaceAll("~1", "/").replaceAll("~0", "~");
    target = isObject(target) || Array.isArray(target) ? (target as Record<string, unknown>)[key] : undefined;
    if (target === undefined) throw new Problem(path, `cannot resolve $ref ${ref}`);
  }
  return target;
}

/** The types a node names (none: whatever its keywords imply, checked as such). */
function types(node: Node, path: string): string[] {
  const type = node.type;
  if (type === undefined) return ["pattern", "minLength", "maxLength", "format"].some((key) => key in node) ? ["string"] : [];
  const list = Array.isArray(type) ? type : [type];
  if (list.length === 0) throw new Problem(path, "type must not be empty");
  for (const name of list) if (typeof name !== "string" || !TYPES.has(name)) throw new Problem(path, `unknown type ${JSON.stringify(name)}`);
  return list as string[];
}

function checkType(type: string, node: Node, path: string, strict: boolean): void {
  if (type === "string") return checkString(node, path, strict);
  if (type === "integer") return checkInteger(node, path);
  if (type === "number") return checkNumber(node, path, strict);
  if (type === "array") return checkBounds(node, path, "minItems", "maxItems");
}

function checkString(node: Node, path: string, strict: boolean): void {
  checkBounds(node, path, "minLength", "maxLength", " (llama-server would hang on it)");
  if ("pattern" in node) {
    if (typeof node.pattern !== "string") throw new Problem(path, "pattern must be a string");
    const verdict = patternVerdict(node.pattern);
    if (verdict.kind === "hang") throw new Problem(path, `pattern ${node.pattern}: ${verdict.why} (llama-server would hang on it)`);
    if (verdict.kind === "invalid") throw new Problem(path, `pattern ${node.pattern} is not a valid regular expression: ${verdict.why}`);
    if (verdict.kind === "unsupported" && strict) throw new Problem(path, `llama-server cannot enforce pattern ${node.pattern}: ${verdict.why} (send strict: false to have it ignored)`);
  }
  if ("format" in node) {
    if (typeof node.format !== "string") throw new Problem(path, "format must be a string");
    if (strict && !FORMATS.has(node.format)) throw new Problem(path, `llama-server does not enforce format ${node.format} (it does date, time, date-time and uuid; send strict: false to have it ignored)`);
  }
}

/** `min` and `max` must be counts, the one no greater than the other. */
function checkBounds(node: Node, path: string, min: string, max: string, consequence = ""): void {
  for (const key of [min, max]) if (key in node && !isCount(node[key])) throw new Problem(path, `${key} must be a non-negative integer`);
  if (min in node && max in node && (node[min] as number) > (node[max] as number)) {
    throw new Problem(path, `${min} ${String(node[min])} is above ${max} ${String(node[max])}${consequence}`);
  }
}

/** The integers an integer's bounds admit, rounded inwards as llama-server does: at least one. */
function checkInteger(node: Node, path: string): void {
  for (const key of NUMBER_BOUNDS) if (key in node && typeof node[key] !== "number") throw new Problem(path, `${key} must be a number`);
  const low = "minimum" in node ? Math.ceil(node.minimum as number) : "exclusiveMinimum" in node ? Math.floor(node.exclusiveMinimum as number) + 1 : -Infinity;
  const high = "maximum" in node ? Math.floor(node.maximum as number) : "exclusiveMaximum" in node ? Math.ceil(node.exclusiveMaximum as number) - 1 : Infinity;
  if (low > high) throw new Problem(path, "no integer lies within its bounds");
}

function checkNumber(node: Node, path: string, strict: boolean): void {
  for (const key of NUMBER_BOUNDS) if (key in node && typeof node[key] !== "number") throw new Problem(path, `${key} must be a number`);
  const low = (node.minimum ?? node.exclusiveMinimum) as number | undefined;
  const high = (node.maximum ?? node.exclusiveMaximum) as number | undefined;
  if (low !== undefined && high !== undefined && low > high) throw new Problem(path, "no number lies within its bounds");
  const bound = NUMBER_BOUNDS.find((key) => key in node);
  if (strict && bound) throw new Problem(path, `llama-server does not enforce ${bound} on a number, only on an integer (send strict: false to have it ignored)`);
}

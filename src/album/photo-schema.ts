// The photo service's answer as a JSON Schema, for the common case: every id a safe integer, which
// JSON.parse read exactly (a literal that a double cannot hold rounds to 2^53 or beyond, past the
// bounds). Ajv compiles it at build time into `safe-photos.generated.ts` (npm run gen:validator):
// compiling it when the server starts left Ajv's compiler and its output in the heap for good,
// and that alone cost 1.5–2.6 µs of CPU per album under bench:album (more for the garbage
// collector to walk on every pass).

const nullableString = { type: ["string", "null"] };

export const SAFE_PHOTOS_SCHEMA = {
  type: "array",
  items: {
    type: "object",
    properties: {
      id: { type: "integer", minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
      title: nullableString,
      url: nullableString,
      thumbnailUrl: nullableString,
    },
    required: ["id", "title", "url", "thumbnailUrl"],
  },
};

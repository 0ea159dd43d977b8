import { isAbsolute, join, relative, resolve, sep } from "node:path";
import fc from "fast-check";
import type { IRequest } from "itty-router";
import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { referenceParam } from "../../src/models/lookup.ts";
import { bareName, idPrefix, parseReference, type ModelReference, type ReferenceOptions } from "../../src/models/reference.ts";
import { layout } from "../../src/models/store/layout.ts";
import { findEntry } from "../../src/models/store/store.ts";
import type { IndexEntry } from "../../src/models/store/model-index.ts";

// Property-based fuzzing of model references: whatever a client writes as a model name, the parser
// answers a normalised reference or a 400 `HttpError`, nothing it yields can name a file outside
// the store's root, and everything it yields is bounded. Seeded, so a failure replays exactly.

const SEED = 42;
const RUNS = 3000;
const run = <Ts>(property: fc.IRawProperty<Ts>, numRuns = RUNS) => fc.assert(property, { seed: SEED, numRuns });

/** The store's root; nothing is written: only paths are computed and compared. */
const ROOT = resolve("/models-root");

const HEX64 = fc.string({ unit: fc.constantFrom(..."0123456789abcdef"), minLength: 64, maxLength: 64 });
const HEX12 = fc.string({ unit: fc.constantFrom(..."0123456789abcdef"), minLength: 12, maxLength: 12 });

/** Pieces that traversal, encoding, case and registry parsing are known to trip on. */
const PIECES = [
  "..", ".", "/", "//", "\\", "%2e%2e", "%2E%2E", "%2f", "%2F", "%5c", "%00", "%", "%E0%A4%A",
  "\u0000", "\u001f", "\u007f", " ", "\t", "\n", "\u00a0", "\u212a", "\u0130", "\u017f", "\u00e9", "\u{1f600}", "\ud800",
  ":", "@", "#", "?", "sha256:", "sha512:", "hf.co/", "HF.CO/", "huggingface.co/", "HuggingFace.co/",
  "docker.io/", "index.docker.io/", "registry-1.docker.io/", "localhost", "localhost/", "localhost:5000/",
  "example.com/", "EXAMPLE.COM:443/", ":5000", ":99999", ":0", "[::1]:5000/", "[::1]/", "127.0.0.1:1/",
  "ai/", "AI/", "myorg/", "smollm2", "SmolLM2", ":latest", ":Q4_K_M", ":v1", "-", "_", "__", "a", "0", "x.y",
];

const piece = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...PIECES) },
  { weight: 2, arbitrary: fc.stringMatching(/^[a-z0-9]{1,8}$/) },
  { weight: 1, arbitrary: HEX64.map((hex) => `sha256:${hex}`) },
  { weight: 1, arbitrary: HEX64 },
  { weight: 1, arbitrary: HEX12 },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 4 }) },
);

/** A name built like a real one (host, namespace, name, tag or digest), each part maybe a trap. */
const structured = fc
  .tuple(
    fc.option(fc.constantFrom("hf.co/", "huggingface.co/", "docker.io/", "localhost:5000/", "Example.com:8080/", "127.0.0.1:1/", "[::1]:5000/"), { nil: "" }),
    fc.array(fc.oneof(fc.stringMatching(/^[a-z0-9]+([._-][a-z0-9]+)*$/), fc.constantFrom("..", ".", "", "%2e%2e", "AI", "Org", "\u212a")), { minLength: 1, maxLength: 4 }),
    fc.oneof(
      { withCrossShrink: true },
      fc.constant(""),
      fc.stringMatching(/^:[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}$/),
      HEX64.map((hex) => `@sha256:${hex}`),
      fc.constantFrom(":", ":..", ":-x", "@sha256:", "@sha256:ABC", `:${"t".repeat(128)}`, `:${"t".repeat(129)}`),
    ),
  )
  .map(([host, path, suffix]) => `${host}${path.join("/")}${suffix}`);

/** Names around the 512-character limit, and far past it. */
const long = fc.oneof(
  fc.integer({ min: 490, max: 530 }).map((n) => `ai/${"a".repeat(n)}`),
  fc.integer({ min: 490, max: 530 }).map((n) => `hf.co/org/${"b".repeat(n)}`),
  fc.integer({ min: 100, max: 140 }).map((n) => `ai/m:${"T".repeat(n)}`),
  fc.integer({ min: 100, max: 300 }).map((n) => `${"a/".repeat(n)}z`),
  fc.integer({ min: 200, max: 4000 }).map((n) => "../".repeat(n)),
  fc.string({ unit: "binary", minLength: 500, maxLength: 2000 }),
);

const referenceText = fc.oneof(
  { weight: 4, arbitrary: fc.array(piece, { maxLength: 12 }).map((parts) => parts.join("")) },
  { weight: 4, arbitrary: structured },
  { weight: 1, arbitrary: long },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme-ascii", maxLength: 40 }) },
);

const options: fc.Arbitrary<ReferenceOptions> = fc.constantFrom(
  {},
  { defaultRegistry: "docker.io" },
  { defaultRegistry: "localhost:5000" },
  { defaultRegistry: "127.0.0.1:1" },
  { defaultRegistry: "Registry.Example.com" },
);

type Outcome = { ok: true; reference: ModelReference } | { ok: false; error: HttpError };

/** Parses, and fails the property on any thrown value other than a 400 `HttpError`. */
function outcome(input: string, opts: ReferenceOptions): Outcome {
  try {
    return { ok: true, reference: parseReference(input, opts) };
  } catch (error) {
    if (!(error instanceof HttpError)) throw new Error(`parseReference threw a ${String((error as Error)?.constructor?.name)}: ${String(error)}`);
    expect(error.status).toBe(400);
    expect(error.code).toBe("invalid_reference");
    return { ok: false, error };
  }
}

/** True when `path`, resolved, is `root` itself or below it. */
function isUnder(root: string, path: string): boolean {
  const rel = relative(root, resolve(path));
  return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
}

/** Printable ASCII only: no control characters, spaces, backslashes or other scripts' look-alikes. */
const PRINTABLE_ASCII = /^[\u0021-\u005b\u005d-\u007e]*$/;

describe("parseReference under fuzzing", () => {
  it("answers a reference or a 400 HttpError, never another exception", () => {
    run(
      fc.property(referenceText, options, (input, opts) => {
        const result = outcome(input, opts);
        if (!result.ok) {
          // The error names the input, but bounded.
          expect(result.error.message.length).toBeLessThanOrEqual(1200);
        }
      }),
    );
  });

  it("keeps every accepted reference bounded", () => {
    run(
      fc.property(referenceText, options, (input, opts) => {
        const result = outcome(input, opts);
        if (!result.ok) return;
        const { registry, repository, remotePath, tag, digest, key } = result.reference;
        expect(registry.length).toBeGreaterThan(0);
        expect(registry.length).toBeLessThanOrEqual(512);
        expect(repository.length).toBeGreaterThan(0);
        expect(repository.length).toBeLessThanOrEqual(512 + "ai/".length);
        expect(remotePath.length).toBe(repository.length);
        expect(tag.length).toBeGreaterThan(0);
        expect(tag.length).toBeLessThanOrEqual(128);
        if (digest !== undefined) expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
        expect(key.length).toBeLessThanOrEqual(512 + "ai/".length + ":latest".length);
      }),
    );
  });

  it("yields only printable ASCII, so nothing reaches a path or a URL unescaped", () => {
    run(
      fc.property(referenceText, options, (input, opts) => {
        const result = outcome(input, opts);
        if (!result.ok) return;
        const { registry, repository, remotePath, tag, key } = result.reference;
        for (const [name, value] of Object.entries({ registry, repository, remotePath, tag, key })) {
          expect(value, `${name} of ${JSON.stringify(input)}`).toMatch(PRINTABLE_ASCII);
        }
        expect(remotePath.toLowerCase()).toBe(repository);
      }),
    );
  });

  it("never names a path outside the store root, however its parts are joined", () => {
    const store = layout(ROOT);
    run(
      fc.property(referenceText, options, (input, opts) => {
        const result = outcome(input, opts);
        if (!result.ok) return;
        const { registry, repository, remotePath, tag, digest, key } = result.reference;
        for (const component of repository.split("/")) {
          expect(component).not.toBe("");
          expect(component).not.toBe(".");
          expect(component).not.toBe("..");
        }
        const candidates = [
          [key],
          ["manifests", registry, repository, tag],
          ["manifests", registry, remotePath, tag],
          key.split("/"),
          ["manifests", "sha256", registry, repository],
        ];
        for (const parts of candidates) {
          const path = join(ROOT, ...parts);
          expect(isUnder(ROOT, path), `${path} from ${JSON.stringify(input)}`).toBe(true);
          // Nothing collapsed or was dropped: every part of the name is a real directory level.
          expect(path, `${JSON.stringify(parts)} from ${JSON.stringify(input)}`).toBe([ROOT, ...parts].join(sep));
        }
        expect(isUnder(store.blobsDir, join(store.blobsDir, repository))).toBe(true);
        if (digest) {
          expect(relative(store.blobsDir, store.blob(digest))).toBe(digest.slice("sha256:".length));
          expect(relative(store.manifestsDir, store.manifest(digest))).toBe(digest.slice("sha256:".length));
        }
      }),
    );
  });

  it("is idempotent: a key parses back to the same model (registry, repository, tag, digest)", () => {
    run(
      fc.property(referenceText, options, (input, opts) => {
        const result = outcome(input, opts);
        if (!result.ok) return;
        const first = result.reference;
        const again = outcome(first.key, opts);
        expect(again.ok, `the key ${JSON.stringify(first.key)} of ${JSON.stringify(input)} does not parse`).toBe(true);
        if (!again.ok) return;
        const { registry, repository, tag, digest, key } = again.reference;
        // Equal keys must mean the same model: the store finds models by key.
        expect({ registry, repository, tag, digest, key }, `input ${JSON.stringify(input)}`).toEqual({
          registry: first.registry,
          repository: first.repository,
          tag: first.tag,
          digest: first.digest,
          key: first.key,
        });
      }),
    );
  });

  it("accepts a fair share of the generated names (the properties above are not vacuous)", () => {
    let accepted = 0;
    let rejected = 0;
    run(
      fc.property(referenceText, options, (input, opts) => {
        if (outcome(input, opts).ok) accepted++;
        else rejected++;
      }),
      1000,
    );
    expect(accepted).toBeGreaterThan(150);
    expect(rejected).toBeGreaterThan(150);
  });
});

describe("bareName and idPrefix under fuzzing", () => {
  it("bareName of an accepted key is one non-empty path component", () => {
    run(
      fc.property(referenceText, options, (input, opts) => {
        const result = outcome(input, opts);
        if (!result.ok) return;
        const name = bareName(result.reference.key);
        expect(name).toMatch(/^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/);
        expect(result.reference.repository.endsWith(name)).toBe(true);
      }),
    );
  });

  it("idPrefix answers nothing or sha256: and 12 to 64 hex digits", () => {
    run(
      fc.property(fc.oneof(referenceText, HEX64, HEX12, HEX64.map((h) => ` sha256:${h} `)), (input) => {
        const id = idPrefix(input);
        if (id !== undefined) expect(id).toMatch(/^sha256:[0-9a-f]{12,64}$/);
      }),
    );
  });
});

describe("the store layout under fuzzing", () => {
  const store = layout(ROOT);
  const digestText = fc.oneof(
    referenceText,
    HEX64.map((hex) => `sha256:${hex}`),
    fc.tuple(HEX64, fc.constantFrom("/..", "/../x", "\n", "\u0000", "A", "/", ".incomplete")).map(([hex, tail]) => `sha256:${hex}${tail}`),
    fc.tuple(fc.constantFrom("../", "..\\", "/", "sha256:../", "SHA256:"), HEX64).map(([head, hex]) => `${head}${hex}`),
  );

  it("maps a digest to a file directly in its folder, or throws an Error", () => {
    run(
      fc.property(digestText, (digest) => {
        for (const [make, dir, suffix] of [
          [store.blob, store.blobsDir, ""],
          [store.incompleteBlob, store.blobsDir, ".incomplete"],
          [store.manifest, store.manifestsDir, ""],
        ] as const) {
          let path: string;
          try {
            path = make(digest);
          } catch (error) {
            expect(error).toBeInstanceOf(Error);
            expect((error as Error).message.length).toBeLessThanOrEqual(200);
            continue;
          }
          expect(isUnder(ROOT, path)).toBe(true);
          expect(path.startsWith(dir + sep)).toBe(true);
          expect(path.slice(dir.length + 1)).toMatch(new RegExp(`^[0-9a-f]{64}${suffix.replace(".", "\\.")}$`));
        }
      }),
    );
  });
});

describe("finding a model by a fuzzed name", () => {
  const digest = (c: string) => `sha256:${c.repeat(64)}`;
  const models: IndexEntry[] = [
    { id: digest("a"), tags: ["ai/smollm2:latest"], created: 0, config: {}, files: { gguf: [digest("1")] } },
    { id: digest("b"), tags: ["myorg/smollm2:v1", "localhost:5000/ai/tiny:latest"], created: 0, config: {}, files: { gguf: [digest("2")] } },
    { id: `sha256:${"a".repeat(12)}${"c".repeat(52)}`, tags: ["huggingface.co/org/repo:Q4_K_M"], created: 0, config: {}, files: { gguf: [digest("3")] } },
  ];

  it("finds a model, finds none, or throws a 400 HttpError", () => {
    run(
      fc.property(fc.oneof(referenceText, fc.constantFrom("smollm2", "smollm2:v1", "tiny", "aaaaaaaaaaaa", digest("b"))), options, (input, opts) => {
        try {
          const found = findEntry(models, input, opts);
          if (found) expect(models).toContain(found);
        } catch (error) {
          expect(error).toBeInstanceOf(HttpError);
          expect((error as HttpError).status).toBe(400);
        }
      }),
    );
  });
});

describe("a reference taken from a request path under fuzzing", () => {
  const rawSegment = fc.oneof(
    referenceText.map((text) => encodeURI(text.replace(/[\ud800-\udfff]/g, ""))),
    fc.array(fc.constantFrom("%", "%2", "%zz", "%E0%A4%A", "%C0%AF", "%2e%2e", "%2F", "%00", "%FF", "a", "/", ".."), { maxLength: 8 }).map((p) => p.join("")),
    fc.string({ unit: "binary", maxLength: 30 }),
  );

  it("decodes to a string or throws a 400 HttpError", () => {
    run(
      fc.property(rawSegment, (raw) => {
        try {
          expect(typeof referenceParam({ params: { reference: raw } } as unknown as IRequest)).toBe("string");
        } catch (error) {
          expect(error).toBeInstanceOf(HttpError);
          expect((error as HttpError).status).toBe(400);
          expect((error as HttpError).code).toBe("invalid_reference");
        }
      }),
    );
  });
});

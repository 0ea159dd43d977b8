import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import * as z from "zod";
import { badSettingsFile, describe } from "./errors.ts";
import { refuseFlags } from "./flags.ts";
import { KEEP_ALIVE_PATTERN } from "./policy.ts";

// Per-model runner settings, set with POST /engines/_configure and kept in one JSON file, so that
// they apply on every load: after an unload, after a restart. Keyed by model id, so every tag of a
// model shares them.

export const ModelSettings = z.object({
  contextSize: z.number().int().nonnegative().optional(),
  slots: z.number().int().min(1).max(64).optional(),
  keepAlive: z.string().regex(KEEP_ALIVE_PATTERN).optional(),
  /** Compute threads of the model's runners; default: a share of the cores. */
  threads: z.number().int().min(1).max(1024).optional(),
  /** llama-server's `--reasoning-budget`: -1 unrestricted, 0 no thinking. */
  reasoningBudget: z.number().int().min(-1).optional(),
  /** Speculative decoding with a draft model of the store, resolved to its weights when configured. */
  speculative: z
    .object({
      draftModel: z.string().min(1),
      draftPath: z.string().min(1),
      numTokens: z.number().int().min(1).max(64).optional(),
      minAcceptanceRate: z.number().min(0).max(1).optional(),
    })
    .optional(),
  /** Bytes of llama-server's host prompt cache (`--cache-ram`, whole MiB; 0: off); default: INFERENCE_CACHE_RAM. */
  cacheRam: z.number().int().nonnegative().multipleOf(1024 * 1024).optional(),
  /** Embedding pooling; default: the model's own, else mean (see `embeddingPooling`). */
  pooling: z.enum(["mean", "cls", "last", "rank"]).optional(),
  /** The llama.cpp build its runners launch on (a tag, reference, digest, or `builtin`); default: the default engine. */
  engine: z.string().regex(/^[\x21-\x7e]{1,300}$/).optional(),
  runtimeFlags: z
    .array(z.string())
    .max(64)
    .superRefine((flags, ctx) => {
      const reason = refuseFlags(flags);
      if (reason) ctx.addIssue({ code: "custom", message: reason });
    })
    .optional(),
});
export type ModelSettings = z.infer<typeof ModelSettings>;

const SettingsFile = z.record(z.string(), ModelSettings);

export interface SettingsStore {
  get(modelId: string): Promise<ModelSettings>;
  /** Every model's settings, by model id. */
  all(): Promise<Record<string, ModelSettings>>;
  /** Merges `changes` into the model's settings and writes the file (temporary name, then rename). */
  update(modelId: string, changes: ModelSettings): Promise<ModelSettings>;
}

export function createSettingsStore(file: string): SettingsStore {
  let cache: Promise<Record<string, ModelSettings>> | undefined;
  let writing: Promise<unknown> = Promise.resolve();
  // A failed read is not kept: once the file is fixed, the next request reads it again.
  const all = () =>
    (cache ??= readSettings(file).catch((error: unknown) => {
      cache = undefined;
      throw error;
    }));
  return {
    async get(modelId) {
      return (await all())[modelId] ?? {};
    },
    all: async () => ({ ...(await all()) }),
    async update(modelId, changes) {
      const settings = await all();
      const merged = { ...settings[modelId], ...changes };
      settings[modelId] = merged;
      // Writes in call order, so the last update is the one on disk.
      writing = writing.catch(() => {}).then(() => writeSettings(file, settings));
      await writing;
      return merged;
    },
  };
}

async function readSettings(file: string): Promise<Record<string, ModelSettings>> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return {};
    throw badSettingsFile(file, describe(error));
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw badSettingsFile(file, describe(error));
  }
  const parsed = SettingsFile.safeParse(json);
  if (!parsed.success) throw badSettingsFile(file, z.prettifyError(parsed.error));
  return parsed.data;
}

async function writeSettings(file: string, settings: Record<string, ModelSettings>): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  const temporary = `${file}.${crypto.randomUUID()}.tmp`;
  await writeFile(temporary, JSON.stringify(settings, null, 2) + "\n");
  await rename(temporary, file);
}

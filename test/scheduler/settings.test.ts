import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { createSettingsStore } from "../../src/scheduler/settings.ts";

let dir: string;
let file: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "llamadock-settings-"));
  file = join(dir, "engine-settings.json");
});
afterEach(() => rm(dir, { recursive: true, force: true }));

describe("settings store", () => {
  it("keeps updates on disk for the next store", async () => {
    await createSettingsStore(file).update("sha256:a", { slots: 2 });
    await createSettingsStore(file).update("sha256:a", { contextSize: 512 });
    expect(await createSettingsStore(file).get("sha256:a")).toEqual({ slots: 2, contextSize: 512 });
    expect(await createSettingsStore(file).get("sha256:b")).toEqual({});
  });

  it.each([
    ["not JSON", "{ not json"],
    ["invalid settings", JSON.stringify({ "sha256:a": { slots: 0 } })],
  ])("B5: a bad file (%s) is an error naming the file, and fixing the file is enough", async (_, text) => {
    await writeFile(file, text);
    const store = createSettingsStore(file);
    const error = await store.get("sha256:a").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HttpError);
    expect((error as HttpError).message).toContain(file);
    await writeFile(file, JSON.stringify({ "sha256:a": { slots: 2 } }));
    expect(await store.get("sha256:a")).toEqual({ slots: 2 });
  });
});

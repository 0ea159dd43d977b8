import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { loadConfig } from "../../src/config.ts";
import { HEALTH_PATHS } from "../../src/pod/health.ts";
import { projectRoot } from "../support/server-process.ts";

// deploy/compose.yaml's pool: one replica per GPU behind the gateway, which checks readiness.

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const compose = parse(readFileSync(join(projectRoot, "deploy", "compose.yaml"), "utf8"), { merge: true }) as any;
const replicas = Object.entries(compose.services as Record<string, any>).filter(([, s]) => s.profiles?.includes("pool") && s.image?.startsWith("llamadock"));
const gateway = compose.configs.gateway.content as string;

describe("the compose pool", () => {
  it("gives each replica its own GPU", () => {
    const gpus = replicas.map(([, s]) => s.deploy.resources.reservations.devices[0].device_ids);
    expect(gpus).toEqual([["0"], ["1"]]);
  });

  it("sends the gateway's requests to every replica, on the port they listen on", () => {
    const servers = [...gateway.matchAll(/^\s*server \S+ (\S+):(\d+)/gm)].map((m) => [m[1], Number(m[2])]);
    const port = loadConfig({ SERVICES: "runner" }, []).runner.port;
    expect(servers).toEqual(replicas.map(([name]) => [name, port]));
    expect(compose.services.gateway.depends_on).toEqual(replicas.map(([name]) => name));
  });

  it("checks readiness on a health route that a replica's settings leave open without a key", () => {
    const path = /option httpchk GET (\S+)/.exec(gateway)![1]!;
    expect(path).toBe("/readyz");
    expect(HEALTH_PATHS).toContain(path);
    const env = { ...replicas[0]![1].environment, API_KEYS: "k" };
    expect(loadConfig(env, []).security.openPaths).toContain(path);
  });
});

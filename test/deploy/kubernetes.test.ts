import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { buildServices, type Service } from "../../src/app.ts";
import { loadConfig } from "../../src/config.ts";
import { guard } from "../../src/http/guard.ts";
import { detectRuntime } from "../../src/runtime/index.ts";
import { projectRoot, runtimeBinary } from "../support/server-process.ts";
import { hasKubectl, render, schemaProblems, selects, type K8sObject } from "./manifests.ts";

// The Kubernetes manifests, without a cluster: each overlay renders with `kubectl kustomize`, each
// object validates against its schema, and the objects wire together (selectors, ports, probe paths
// the app answers, the metric KEDA reads, the init container's command).

const OVERLAYS = ["overlays/cpu-example", "overlays/gpu-pool-example"];
const kubectl = hasKubectl();
// On a developer's machine without kubectl these are skipped, with a warning; in CI (CI set) a
// missing kubectl fails them: a check that did not run must not pass as one that did.
const inCi = Boolean(process.env.CI);
if (!kubectl && !inCi) console.warn("kubectl is not installed: the Kubernetes manifests are NOT checked (scripts/setup.sh --test installs it where apt offers it)");

const rendered = new Map<string, K8sObject[]>();
const all = () => [...rendered.values()].flat();
const ofKind = (objects: K8sObject[], kind: string) => objects.filter((o) => o.kind === kind);
const named = (objects: K8sObject[], kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name);
const podSpecs = (objects: K8sObject[]) => ofKind(objects, "Deployment").map((d) => d.spec.template);
/** The containers (init ones too) of the Deployments whose pods `selector` picks. */
const containersSelected = (objects: K8sObject[], selector: Record<string, string>) =>
  podSpecs(objects)
    .filter((t) => selects(selector, t.metadata.labels))
    .flatMap((t) => t.spec.containers as { name: string; ports?: { name?: string; containerPort: number }[] }[]);
const hasPort = (containers: ReturnType<typeof containersSelected>, port: string | number) =>
  containers.some((c) => c.ports?.some((p) => p.containerPort === port || p.name === port));

describe.skipIf(!kubectl && !inCi)("kubernetes manifests", () => {
  beforeAll(() => {
    if (!kubectl) throw new Error("kubectl is not installed, and CI is set: install it (scripts/setup.sh --test) so that the Kubernetes manifests are checked");
    for (const overlay of OVERLAYS) rendered.set(overlay, render(overlay));
  });

  it.each(OVERLAYS)("%s renders with kubectl kustomize", (overlay) => {
    expect(rendered.get(overlay)!.length).toBeGreaterThan(0);
  });

  it.each(OVERLAYS)("%s: every object validates against its schema", async (overlay) => {
    const problems: string[] = [];
    for (const object of rendered.get(overlay)!) {
      for (const problem of await schemaProblems(object)) problems.push(`${object.kind}/${object.metadata.name}: ${problem}`);
    }
    expect(problems).toEqual([]);
  });

  it("the gpu pool example holds every component's objects", () => {
    const kinds = new Set(rendered.get("overlays/gpu-pool-example")!.map((o) => o.kind));
    for (const kind of ["Deployment", "Service", "PersistentVolumeClaim", "PodDisruptionBudget", "InferencePool", "HTTPRoute", "ScaledObject", "ServiceMonitor"]) {
      expect(kinds, kind).toContain(kind);
    }
    const server = named(rendered.get("overlays/gpu-pool-example")!, "Deployment", "llamadock")!;
    expect(server.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]).toBe(1);
    expect(server.spec.template.spec.containers[0].image).toMatch(/:cuda$/);
  });

  it.each(OVERLAYS)("%s: selectors pick the pods, and every port they name is on the container", (overlay) => {
    const objects = rendered.get(overlay)!;
    for (const deployment of ofKind(objects, "Deployment")) {
      expect(selects(deployment.spec.selector.matchLabels, deployment.spec.template.metadata.labels), deployment.metadata.name).toBe(true);
      for (const container of deployment.spec.template.spec.containers) {
        for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
          const port = container[probe]?.httpGet?.port ?? container[probe]?.grpc?.port;
          if (port !== undefined) expect(hasPort([container], port), `${container.name} ${probe} port ${port}`).toBe(true);
        }
      }
    }
    for (const service of ofKind(objects, "Service")) {
      const containers = containersSelected(objects, service.spec.selector);
      expect(containers.length, `pods of Service ${service.metadata.name}`).toBeGreaterThan(0);
      for (const port of service.spec.ports) expect(hasPort(containers, port.targetPort), `Service ${service.metadata.name} port ${port.targetPort}`).toBe(true);
    }
    for (const pdb of ofKind(objects, "PodDisruptionBudget")) expect(containersSelected(objects, pdb.spec.selector.matchLabels).length).toBeGreaterThan(0);
    for (const monitor of ofKind(objects, "ServiceMonitor")) {
      const services = ofKind(objects, "Service").filter((s) => selects(monitor.spec.selector.matchLabels, s.metadata.labels));
      expect(services.length, "Services of the ServiceMonitor").toBeGreaterThan(0);
      for (const endpoint of monitor.spec.endpoints) expect(services.some((s) => s.spec.ports.some((p: { name: string }) => p.name === endpoint.port))).toBe(true);
    }
  });

  it.each(OVERLAYS)("%s: every ConfigMap, ServiceAccount and Role referred to is rendered; the Secret is the documented one", (overlay) => {
    const objects = rendered.get(overlay)!;
    for (const template of podSpecs(objects)) {
      const spec = template.spec;
      for (const container of [...(spec.initContainers ?? []), ...spec.containers]) {
        for (const source of container.envFrom ?? []) if (source.configMapRef) expect(named(objects, "ConfigMap", source.configMapRef.name)).toBeDefined();
      }
      for (const volume of spec.volumes ?? []) {
        if (volume.configMap) expect(named(objects, "ConfigMap", volume.configMap.name)).toBeDefined();
        if (volume.persistentVolumeClaim) expect(named(objects, "PersistentVolumeClaim", volume.persistentVolumeClaim.claimName)).toBeDefined();
        if (volume.secret) expect(volume.secret.secretName).toBe("llamadock-api-keys");
      }
      if (spec.serviceAccountName) expect(named(objects, "ServiceAccount", spec.serviceAccountName)).toBeDefined();
    }
    for (const binding of ofKind(objects, "RoleBinding")) {
      expect(named(objects, binding.roleRef.kind, binding.roleRef.name)).toBeDefined();
      for (const subject of binding.subjects) expect(named(objects, subject.kind, subject.name)).toBeDefined();
    }
  });

  it("the InferencePool picks the replicas on their port, its endpoint picker is a Service of the picker, the route and KEDA name what exists", () => {
    const objects = rendered.get("overlays/gpu-pool-example")!;
    const [pool] = ofKind(objects, "InferencePool");
    const replicas = containersSelected(objects, pool!.spec.selector.matchLabels);
    expect(replicas.map((c) => c.name)).toEqual(["llamadock"]);
    for (const { number } of pool!.spec.targetPorts) expect(hasPort(replicas, number)).toBe(true);
    const picker = named(objects, "Service", pool!.spec.endpointPickerRef.name)!;
    expect(picker.spec.ports.map((p: { port: number }) => p.port)).toContain(pool!.spec.endpointPickerRef.port.number);
    expect(containersSelected(objects, picker.spec.selector).map((c) => c.name)).toEqual(["epp"]);
    const args: string[] = containersSelected(objects, picker.spec.selector)[0]! ["args" as never];
    expect(args[args.indexOf("--pool-name") + 1]).toBe(pool!.metadata.name);
    for (const route of ofKind(objects, "HTTPRoute")) {
      for (const rule of route.spec.rules) for (const ref of rule.backendRefs) expect(named(objects, ref.kind, ref.name), ref.name).toBeDefined();
    }
    for (const scaled of ofKind(objects, "ScaledObject")) expect(named(objects, scaled.spec.scaleTargetRef.kind, scaled.spec.scaleTargetRef.name)).toBeDefined();
  });

  it("the endpoint picker scores an agent session's replica, by the session its headers name, beside the load and the prefix", () => {
    type Plugin = { type: string; name?: string; parameters?: { strategy?: string; sessionIdConfig?: { sources: { attribute?: string }[] } } };
    type Config = { plugins: Plugin[]; schedulingProfiles: { name: string; plugins: { pluginRef: string; weight?: number }[] }[] };
    const config = parse(named(rendered.get("overlays/gpu-pool-example")!, "ConfigMap", "llamadock-epp")!.data["plugins.yaml"] as string) as Config;
    const declared = new Set(config.plugins.map((p) => p.name ?? p.type));
    for (const profile of config.schedulingProfiles) for (const { pluginRef } of profile.plugins) expect(declared, pluginRef).toContain(pluginRef);
    const scorer = config.plugins.find((p) => p.type === "session-affinity-scorer")!;
    expect(scorer.parameters?.strategy).toBe("session_id");
    // The session as the agent-identity plugin reads it from the agents' headers.
    expect(scorer.parameters?.sessionIdConfig?.sources).toEqual([{ attribute: "agent-identity" }]);
    expect(declared).toContain("agent-identity");
    const weights = new Map(config.schedulingProfiles.find((p) => p.name === "default")!.plugins.map((p) => [p.pluginRef, p.weight]));
    expect(weights.get("session-affinity-scorer")).toBeGreaterThan(0);
    expect(weights.get("prefix-cache-scorer")).toBeGreaterThan(0);
  });

  describe("asked of the app, in process, with the rendered settings", () => {
    let service: Service;
    let ask: (path: string) => Promise<Response>;
    let dir: string;
    beforeAll(async () => {
      const objects = rendered.get("overlays/gpu-pool-example")!;
      const settings = ofKind(objects, "ConfigMap").find((c) => c.metadata.name.startsWith("llamadock-settings"))!.data as Record<string, string>;
      dir = await mkdtemp(join(tmpdir(), "llamadock-kube-"));
      // The pod's settings, but its paths here, a key instead of the Secret's file, and no pinned
      // model (nothing is pulled): only which routes answer is asked.
      const config = loadConfig(
        {
          ...settings,
          MODELS_PATH: join(dir, "models"),
          INFERENCE_SETTINGS_PATH: join(dir, "settings.json"),
          INFERENCE_RUNTIME_DIR: join(dir, "run"),
          INFERENCE_LOG_DIR: join(dir, "logs"),
          API_KEYS_FILE: "",
          API_KEYS: "cluster-key",
          PINNED_MODELS: "",
        },
        [],
      );
      service = (await buildServices(config, await detectRuntime())).find((s) => s.name === "model runner")!;
      const handler = guard(service.handler, { kind: "tcp", hostname: config.runner.host, port: config.runner.port }, service.policy);
      // As the kubelet and Prometheus call it: the pod's address, no key.
      ask = (path) => Promise.resolve(handler(new Request(`http://10.1.2.3:${config.runner.port}${path}`)));
    });
    afterAll(async () => {
      await service?.stop?.();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("every probe path is a route it answers without a key", async () => {
      const paths = new Set<string>();
      for (const template of podSpecs(all())) {
        for (const container of template.spec.containers) {
          for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) if (container[probe]?.httpGet) paths.add(container[probe].httpGet.path);
        }
      }
      const epp = podSpecs(all()).flatMap((t) => t.spec.containers).filter((c) => c.name === "epp");
      expect(epp.length).toBeGreaterThan(0); // the picker's probes are gRPC, on its own ports
      expect([...paths].sort()).toEqual(["/livez", "/readyz"]);
      for (const path of paths) expect([200, 503], path).toContain((await ask(path)).status);
      expect((await ask("/v1/models")).status).toBe(401); // a key is asked elsewhere
    });

    it("the metrics path of the ServiceMonitor and the endpoint picker answers without a key, with the series KEDA reads", async () => {
      const objects = rendered.get("overlays/gpu-pool-example")!;
      const [monitor] = ofKind(objects, "ServiceMonitor");
      const picker = named(objects, "ConfigMap", "llamadock-epp")!.data["plugins.yaml"] as string;
      const pickerPath = /path:\s*(\S+)/.exec(picker)![1]!;
      expect(pickerPath).toBe(monitor!.spec.endpoints[0].path);
      const answer = await ask(pickerPath);
      expect(answer.status).toBe(200);
      const text = await answer.text();
      // The picker reads vLLM's names; KEDA the metric in its query.
      for (const name of ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"]) expect(text).toContain(`# TYPE ${name} gauge\n`);
      const [scaled] = ofKind(objects, "ScaledObject");
      const query = scaled!.spec.triggers[0].metadata.query as string;
      const metrics = [...query.matchAll(/([a-zA-Z_:][\w:]*)\{/g)].map((m) => m[1]!);
      expect(metrics).toEqual(["llamadock:num_requests_waiting"]);
      for (const metric of metrics) expect(text).toContain(`# TYPE ${metric} gauge\n`);
    });
  });

  it("the init container runs real subcommands of the image's `llamadock` command", () => {
    const server = named(all(), "Deployment", "llamadock")!;
    const [init] = server.spec.template.spec.initContainers;
    const script = [...init.command, ...init.args].join("\n");
    const subcommands = [...script.matchAll(/(?:^|[\s;(])llamadock\s+([a-z][\w-]*)/gm)].map((m) => m[1]!);
    expect(subcommands).toEqual(["status", "pull"]);
    // The image puts `llamadock` on PATH as the project's command-line entry.
    expect(readFileSync(join(projectRoot, "Dockerfile"), "utf8")).toMatch(/\/usr\/local\/bin\/llamadock/);
    for (const subcommand of subcommands) {
      const help = spawnSync(runtimeBinary("bun"), ["src/cli/main.ts", subcommand, "--help"], { cwd: projectRoot, encoding: "utf8" });
      expect(help.status, `llamadock ${subcommand} --help: ${help.stderr}`).toBe(0);
    }
  });

  it("the pod runs as the image's numeric user and group, read-only, with nothing added", () => {
    const dockerfile = readFileSync(join(projectRoot, "Dockerfile"), "utf8");
    const [, uid, gid] = /^USER (\d+):(\d+)$/m.exec(dockerfile) ?? [];
    expect(uid, "a numeric USER uid:gid in the Dockerfile").toBeDefined();
    for (const overlay of OVERLAYS) {
      const pod = named(rendered.get(overlay)!, "Deployment", "llamadock")!.spec.template.spec;
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: Number(uid), runAsGroup: Number(gid) });
      for (const container of [...pod.initContainers, ...pod.containers]) {
        expect(container.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } });
      }
    }
  });
});

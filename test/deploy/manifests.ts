import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Ajv, type ValidateFunction } from "ajv";
import { parse, parseAllDocuments } from "yaml";
import { projectRoot } from "../support/server-process.ts";

// Rendering the Kustomize overlays with kubectl, and checking each object against its schema:
// core, apps, policy and RBAC objects with kubernetes-models, the CRDs' objects (InferencePool,
// HTTPRoute, ScaledObject, ServiceMonitor) with ajv against their published schemas, vendored in
// deploy/kubernetes/schemas.

export const KUBE_DIR = join(projectRoot, "deploy", "kubernetes");

// Plain objects as rendered: fields are read loosely and checked by the schemas first.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> }; [field: string]: any };

export const hasKubectl = (): boolean => spawnSync("kubectl", ["version", "--client"], { stdio: "ignore" }).status === 0;

/** `kubectl kustomize <dir>`: every object, or the error kubectl printed. */
export function render(dir: string): K8sObject[] {
  const result = spawnSync("kubectl", ["kustomize", join(KUBE_DIR, dir)], { encoding: "utf8" });
  if (result.status !== 0) throw new Error(`kubectl kustomize ${dir} failed:\n${result.stderr}`);
  return parseAllDocuments(result.stdout).map((doc) => doc.toJS() as K8sObject);
}

/** The vendored CRDs, by the apiVersion and kind of the objects they define. */
const CRDS: Record<string, string> = {
  "inference.networking.k8s.io/v1 InferencePool": "inferencepools.crd.yaml",
  "gateway.networking.k8s.io/v1 HTTPRoute": "httproutes.crd.yaml",
  "keda.sh/v1alpha1 ScaledObject": "scaledobjects.crd.yaml",
  "monitoring.coreos.com/v1 ServiceMonitor": "servicemonitors.crd.yaml",
};

const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: true });
const crdValidators = new Map<string, ValidateFunction>();

/** The problems of `object` against its schema, as text; empty when it is valid. */
export async function schemaProblems(object: K8sObject): Promise<string[]> {
  const key = `${object.apiVersion} ${object.kind}`;
  if (CRDS[key]) return crdProblems(key, object);
  const [group, version] = object.apiVersion.includes("/") ? object.apiVersion.split("/") : [undefined, object.apiVersion];
  const path = group ? `kubernetes-models/${group}/${version}/${object.kind}` : `kubernetes-models/${version}/${object.kind}`;
  const Model = (await import(path).catch(() => undefined))?.[object.kind] as (new (data: object) => { validate(): void }) | undefined;
  if (!Model) return [`no schema known for ${key}`];
  try {
    new Model(object).validate();
    return [];
  } catch (error) {
    return [(error as Error).message];
  }
}

function crdProblems(key: string, object: K8sObject): string[] {
  let validate = crdValidators.get(key);
  if (!validate) {
    const crd = parse(readFileSync(join(KUBE_DIR, "schemas", CRDS[key]!), "utf8")) as { spec: { versions: { name: string; schema: { openAPIV3Schema: object } }[] } };
    const version = object.apiVersion.split("/")[1];
    const found = crd.spec.versions.find((v) => v.name === version);
    if (!found) return [`the vendored CRD has no version ${version}`];
    validate = ajv.compile(closed(found.schema.openAPIV3Schema) as object);
    crdValidators.set(key, validate);
  }
  if (validate(object)) return [];
  return (validate.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message}${e.params && "additionalProperty" in e.params ? `: ${e.params.additionalProperty}` : ""}`);
}

/**
 * The schema with unknown fields refused, as the API server's strict field validation does: every
 * object schema that lists its properties and does not preserve unknown fields gets
 * `additionalProperties: false` (a misspelt field would otherwise pass, then be dropped).
 */
export function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (!schema || typeof schema !== "object") return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    out[key] = key === "properties" ? Object.fromEntries(Object.entries(value as object).map(([name, sub]) => [name, closed(sub)])) : closed(value);
  }
  if (out.type === "object" && out.properties && out.additionalProperties === undefined && !out["x-kubernetes-preserve-unknown-fields"]) {
    out.additionalProperties = false;
  }
  return out;
}

/** Whether `selector` (matchLabels) picks objects carrying `labels`. */
export const selects = (selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean =>
  !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);

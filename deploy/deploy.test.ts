// The deployment files under deploy/ are checked here, where no Kubernetes or Nomad runs: every Kubernetes object
// against the API's schemas (kubernetes-models), the Nomad jobs parsed as HCL, and each engine's command lines
// against the ones tests/cluster-harness.ts starts the cluster with, so a flag added or renamed there fails here.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse as parseHcl } from '@cdktf/hcl2json';
import { DaemonSet, Deployment } from 'kubernetes-models/apps/v1';
import { Namespace, PersistentVolumeClaim, Secret, Service } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { controlPlaneArgs, gatewayArgs } from '../tests/cluster-harness.js';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

interface Validatable {
  validate(): void;
}
const models: Record<string, new (data: never) => Validatable> = {
  'v1/Namespace': Namespace,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'apps/v1/Deployment': Deployment,
  'apps/v1/DaemonSet': DaemonSet,
};

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
  spec?: Record<string, unknown>;
}

function k8sObjects(): K8sObject[] {
  return parseAllDocuments(readFileSync(here('./kubernetes/sandglass.yaml'), 'utf8')).map((doc) => {
    expect(doc.errors).toEqual([]);
    return doc.toJS() as K8sObject;
  });
}

function validate(obj: K8sObject): void {
  const Model = models[`${obj.apiVersion}/${obj.kind}`];
  if (!Model) throw new Error(`${obj.apiVersion} ${obj.kind} has no schema here: add its model to deploy.test.ts`);
  new Model(obj as never).validate();
}

/** Flags (`--name`) of a command line, each once: what must agree between the harness and a deployment. */
function flags(args: readonly string[]): string[] {
  return args.filter((a) => a.startsWith('--')).sort();
}

// Placeholders: only the flags' names and the subcommand are compared; values differ by design (loopback vs hosts).
const harnessControlPlane = controlPlaneArgs({
  dbUrl: 'postgres://x',
  listen: '127.0.0.1:1',
  nodeSecretFile: 'f',
  keysDir: 'k',
  adminKeyFile: 'a',
  deadAfterS: 30,
  heartbeatIntervalS: 2,
  store: 's3://b/p',
});
const harnessGateway = gatewayArgs({
  controlPlaneUrl: 'http://x',
  nodeId: 'n1',
  nodeSecretFile: 'f',
  store: 's3://b/p',
  listen: '127.0.0.1:1',
  internalListen: '127.0.0.1:2',
  enrolToken: 't',
});

/** A flag given through the environment instead (a secret kept off the command line), by the CLI's variable name. */
const byEnv: Record<string, string> = { SANDGLASS_DB: '--db', SANDGLASS_ENROL_TOKEN: '--enrol-token' };

interface Container {
  command?: string[];
  args: string[];
  env?: { name: string }[];
  readinessProbe?: { httpGet?: { path: string } };
  securityContext?: { privileged?: boolean };
  volumeMounts?: { name: string; mountPath: string }[];
}
interface PodSpec {
  containers: Container[];
  hostNetwork?: boolean;
  volumes?: { name: string; hostPath?: { path: string } }[];
}

function podOf(obj: K8sObject | undefined): PodSpec {
  if (!obj) throw new Error('object missing');
  return (obj.spec as { template: { spec: PodSpec } }).template.spec;
}

describe('Kubernetes manifests', () => {
  const objects = k8sObjects();
  const find = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name);

  it('every object validates against the Kubernetes API schemas', () => {
    expect(objects.length).toBeGreaterThan(5);
    for (const obj of objects) validate(obj);
  });

  it('the validation refuses a malformed object (the check can fail)', () => {
    const cp = structuredClone(find('Deployment', 'sandglass-control-plane')!);
    (cp.spec as { replicas: unknown }).replicas = 'two';
    expect(() => validate(cp)).toThrow(/replicas must be integer/);
    const ds = structuredClone(find('DaemonSet', 'sandglass-gateway')!);
    delete (ds.spec as { selector?: unknown }).selector;
    expect(() => validate(ds)).toThrow(/selector/);
  });

  it('runs the control plane with the flags the cluster test runs it with, ready on /v1/health', () => {
    const deployment = find('Deployment', 'sandglass-control-plane')!;
    expect((deployment.spec as { replicas: number }).replicas).toBeGreaterThanOrEqual(2);
    const [c] = podOf(deployment).containers;
    const env = (c!.env ?? []).map((e) => e.name);
    expect(c!.args[0]).toBe(harnessControlPlane[0]);
    expect(flags([...c!.args, ...env.flatMap((n) => (byEnv[n] ? [byEnv[n]] : []))])).toEqual(flags(harnessControlPlane));
    expect(c!.readinessProbe?.httpGet?.path).toBe('/v1/health');
    expect(find('Service', 'sandglass-control-plane')).toBeDefined();
  });

  it('runs one privileged gateway per host with the flags the cluster test runs it with, enrolling by token', () => {
    const ds = find('DaemonSet', 'sandglass-gateway')!;
    const pod = podOf(ds);
    const [c] = pod.containers;
    expect(c!.args[0]).toBe(harnessGateway[0]);
    // The enrolment token reaches the gateway as SANDGLASS_ENROL_TOKEN, exported by the wrapper from the node's secret.
    const wrapper = c!.command?.join(' ') ?? '';
    const viaWrapper = /export SANDGLASS_ENROL_TOKEN/.test(wrapper) && /exec sandglass "\$@"/.test(wrapper) ? ['--enrol-token'] : [];
    expect(flags([...c!.args, ...viaWrapper])).toEqual(flags(harnessGateway));
    expect(c!.env?.map((e) => e.name)).toContain('SANDGLASS_HOME');
    expect(c!.securityContext?.privileged).toBe(true);
    expect(pod.hostNetwork).toBe(true);
    const hostPaths = (pod.volumes ?? []).flatMap((v) => (v.hostPath ? [v.hostPath.path] : [])).sort();
    expect(hostPaths).toEqual(['/dev/kvm', '/dev/shm', '/var/lib/sandglass']);
  });
});

interface HclTask {
  driver: string;
  config: { command: string; args: string[] }[];
  env?: Record<string, string>[];
  template?: { data: string }[];
}

async function nomadTask(file: string, job: string, group: string, task: string): Promise<{ type: string; task: HclTask }> {
  const json = (await parseHcl(file, readFileSync(here(`./nomad/${file}`), 'utf8'))) as {
    job: Record<string, { type: string; group: Record<string, { task: Record<string, HclTask[]> }[]> }[]>;
  };
  const jobs = Object.keys(json.job);
  expect(jobs).toEqual([job]);
  const j = json.job[job]![0]!;
  return { type: j.type, task: j.group[group]![0]!.task[task]![0]! };
}

describe('Nomad jobs', () => {
  it('the control plane is a service job with the flags the cluster test runs it with', async () => {
    const { type, task } = await nomadTask('control-plane.nomad.hcl', 'sandglass-control-plane', 'control-plane', 'control-plane');
    expect(type).toBe('service');
    const { args } = task.config[0]!;
    const env = (task.template ?? []).flatMap((t) => [...t.data.matchAll(/^\s*(SANDGLASS_\w+)=/gm)].map((m) => m[1]!));
    expect(args[0]).toBe(harnessControlPlane[0]);
    expect(flags([...args, ...env.flatMap((n) => (byEnv[n] ? [byEnv[n]] : []))])).toEqual(flags(harnessControlPlane));
  });

  it('the gateway is a system job (one per host) with the flags the cluster test runs it with', async () => {
    const { type, task } = await nomadTask('gateway.nomad.hcl', 'sandglass-gateway', 'gateway', 'gateway');
    expect(type).toBe('system');
    expect(task.driver).toBe('raw_exec');
    const { args } = task.config[0]!;
    const env = (task.template ?? []).flatMap((t) => [...t.data.matchAll(/(SANDGLASS_\w+)=/g)].map((m) => m[1]!));
    expect(args[0]).toBe(harnessGateway[0]);
    expect(flags([...args, ...env.flatMap((n) => (byEnv[n] ? [byEnv[n]] : []))])).toEqual(flags(harnessGateway));
    expect(Object.keys(task.env?.[0] ?? {})).toContain('SANDGLASS_HOME');
  });
});

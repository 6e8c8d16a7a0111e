// The guest agent binary (Go, static), built by agent/build.sh and cached under a hash of its sources.
import { access, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandglassError } from '@sandglass/core';
import { cacheKey, ensureArtifact, sha256Hex } from './cache.js';
import { exec } from './exec.js';

export interface AgentArtifact {
  key: string;
  path: string;
  /** Hash of the binary itself: what initramfs and rootfs keys depend on. */
  sha256: string;
}

/** Source files whose content decides the binary: agent/*.go, go.mod, go.sum, build.sh. */
export function isAgentSource(file: string): boolean {
  return file.endsWith('.go') || file === 'go.mod' || file === 'go.sum' || file === 'build.sh';
}

export async function agentSourceKey(agentDir: string): Promise<string> {
  let files: string[];
  try {
    files = (await readdir(agentDir)).filter(isAgentSource).sort();
  } catch (e) {
    throw new SandglassError('internal', `cannot read the agent sources in ${agentDir}: ${(e as Error).message}`, { cause: e });
  }
  const sources: Record<string, string> = {};
  for (const f of files) sources[f] = sha256Hex(await readFile(join(agentDir, f)));
  return cacheKey('agent', { sources });
}

export async function ensureAgent(artifactsDir: string, agentDir: string, onLine: (line: string) => void): Promise<AgentArtifact> {
  const key = await agentSourceKey(agentDir);
  const { dir } = await ensureArtifact(artifactsDir, 'agent', key, async (tmp) => {
    const script = join(agentDir, 'build.sh');
    try {
      await access(script);
    } catch {
      throw new SandglassError('internal', `${script} is missing: cannot build the guest agent`);
    }
    await exec('bash', [script, join(tmp, 'sandglass-agent')], { cwd: agentDir, onLine });
    await access(join(tmp, 'sandglass-agent'));
  });
  const path = join(dir, 'sandglass-agent');
  return { key, path, sha256: sha256Hex(await readFile(path)) };
}

// `keys use|status|rotate|revoke`: a tenant's encryption keys (bring your own key); the operator key only.
import type { Command } from 'commander';
import { TenantKeys, type TenantKeyStatus } from '@sandglass/sdk';
import { printJson, printTable, shortTime } from '../output.js';
import type { Act } from './shared.js';

export function registerKeyCommands(program: Command, act: Act): void {
  const keys = program.command('keys').description("a tenant's encryption keys: the built-in keyring or its own PKCS#11 HSM (operator key only)");
  keys
    .command('use')
    .description("register the tenant's key provider: `pkcs11` (with --module, --token, --key, --pin-file) or `keyring`")
    .argument('<tenant>', 'tenant id or name')
    .argument('<provider>', 'pkcs11 or keyring')
    .option('--module <so>', 'path of the PKCS#11 module on the server, e.g. /usr/lib/softhsm/libsofthsm2.so')
    .option('--token <label>', 'label of the token')
    .option('--key <label>', 'label of the AES key on the token that wraps the data keys')
    .option('--pin-file <file>', 'file on the server holding the user PIN (read at each login, never stored)')
    .option('--json', 'print JSON')
    .action(
      act(async (tenant: string, provider: string, flags: { module?: string; token?: string; key?: string; pinFile?: string; json?: boolean }) => {
        if (provider !== 'pkcs11' && provider !== 'keyring') throw new Error(`provider must be pkcs11 or keyring, not ${provider}`);
        const st = await TenantKeys.use(tenant, { provider, module: flags.module, token: flags.token, key: flags.key, pinFile: flags.pinFile });
        await print(st, flags.json);
      }),
    );
  keys
    .command('status')
    .description('provider, data key versions and last use')
    .argument('<tenant>', 'tenant id or name')
    .option('--json', 'print JSON')
    .action(act(async (tenant: string, flags: { json?: boolean }) => print(await TenantKeys.status(tenant), flags.json)));
  keys
    .command('rotate')
    .description('new writes use a new data key version; old data stays readable, no chunk is re-encrypted')
    .argument('<tenant>', 'tenant id or name')
    .option('--key <label>', 'move every version under this new key on the same token')
    .option('--json', 'print JSON')
    .action(act(async (tenant: string, flags: { key?: string; json?: boolean }) => print(await TenantKeys.rotate(tenant, { key: flags.key }), flags.json)));
  keys
    .command('revoke')
    .description("revoke the tenant's key for good: its sandboxes stop, its plaintext is wiped, its data is unreadable")
    .argument('<tenant>', 'tenant id or name')
    .option('--json', 'print JSON')
    .action(
      act(async (tenant: string, flags: { json?: boolean }) => {
        const r = await TenantKeys.revoke(tenant);
        if (flags.json) return printJson(r);
        await print(r.keys, false);
        process.stderr.write(`stopped ${r.stoppedSandboxes.length} sandbox(es)${r.stoppedSandboxes.length ? `: ${r.stoppedSandboxes.join(', ')}` : ''}\n`);
      }),
    );
}

async function print(st: TenantKeyStatus, json: boolean | undefined): Promise<void> {
  if (json) return printJson(st);
  const where = st.pkcs11 ? ` (token ${st.pkcs11.token}, key ${st.pkcs11.key})` : '';
  process.stdout.write(
    `${st.tenantId}: ${st.provider}${where}, version ${st.currentVersion}${st.revoked ? ', REVOKED' : ''}, last used ${shortTime(st.lastUsedAt) || 'never'}\n`,
  );
  await printTable(
    ['VERSION', 'CREATED', 'IN USE'],
    st.versions.map((v) => [String(v.version), shortTime(v.createdAt), v.version === st.currentVersion ? 'new writes' : 'reads']),
  );
}

// `api-keys create|ls|revoke`: a tenant's API keys, shown in full only once, when created.
import { type Command, Option } from 'commander';
import { ApiKeys, type ApiKeyInfo, type ApiKeyRole } from '@sandglass/sdk';
import { parseKeyExpiryS } from '../args.js';
import { printJson, printTable, shortTime } from '../output.js';
import type { Act } from './shared.js';

export function registerApiKeyCommands(program: Command, act: Act): void {
  // `api-keys`, not `keys`: that name is kept for the tenant's encryption keys (BYOK KMS).
  const apiKeys = program.command('api-keys').description("API keys: an admin key manages its own tenant's, the operator key (sandglass up's) every tenant's");
  apiKeys
    .command('create')
    .description('create an API key and print it; it is shown this once and never again')
    .addOption(
      new Option('--role <role>', 'member uses sandboxes; admin also manages keys; operator (operator key only) creates tenants')
        .choices(['member', 'admin', 'operator'])
        .default('member'),
    )
    .option('--tenant <id>', 'the tenant (default: your own; another tenant needs the operator key)')
    .option('--name <name>', 'a label to tell keys apart')
    .option('--expires <duration>', 'refuse the key after this long: 3600, 90m, 12h, 30d (default: never)', parseKeyExpiryS)
    .addOption(
      new Option('--format <format>', 'e2b: spelled e2b_ + hex, for E2B SDK releases that refuse other keys (docs/e2b.md)')
        .choices(['sandglass', 'e2b'])
        .default('sandglass'),
    )
    .option('--json', 'print the key and its metadata as JSON')
    .action(
      act(async (flags: { role: ApiKeyRole; tenant?: string; name?: string; expires?: number; format: 'sandglass' | 'e2b'; json?: boolean }) => {
        const created = await ApiKeys.create({ role: flags.role, tenantId: flags.tenant, name: flags.name, expiresInS: flags.expires, format: flags.format });
        if (flags.json) return printJson(created);
        process.stdout.write(`${created.key}\n`);
        process.stderr.write(
          `${created.id} (${created.role}, tenant ${created.tenantId}${created.expiresAt ? `, expires ${created.expiresAt}` : ''}): store the key now, it is not shown again\n`,
        );
      }),
    );
  apiKeys
    .command('ls')
    .description("list a tenant's API keys (prefixes and metadata, never the keys)")
    .option('--tenant <id>', 'the tenant (default: your own)')
    .option('--json', 'print JSON')
    .action(
      act(async (flags: { tenant?: string; json?: boolean }) => {
        const list = await ApiKeys.list({ tenantId: flags.tenant });
        if (flags.json) return printJson(list);
        const status = (k: ApiKeyInfo) => (k.revokedAt ? 'revoked' : k.expiresAt && Date.parse(k.expiresAt) <= Date.now() ? 'expired' : 'active');
        await printTable(
          ['ID', 'PREFIX', 'ROLE', 'NAME', 'STATUS', 'CREATED', 'EXPIRES', 'LAST USED'],
          list.map((k) => [k.id, `${k.prefix}…`, k.role, k.name ?? '', status(k), shortTime(k.createdAt), shortTime(k.expiresAt), shortTime(k.lastUsedAt)]),
        );
      }),
    );
  apiKeys
    .command('revoke')
    .description('revoke an API key: it is refused from the next request on')
    .argument('<id>', 'key id (key_…)')
    .action(
      act(async (id: string) => {
        await ApiKeys.revoke(id);
      }),
    );
}

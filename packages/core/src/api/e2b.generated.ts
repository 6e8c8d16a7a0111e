// GENERATED from spec/e2b.yaml by scripts/gen.ts (openapi-typescript). Do not edit by hand: run `npm run gen`.

export interface paths {
    "/v2/sandboxes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Lists the tenant's running and paused sandboxes, one page at a time. */
        get: operations["e2bListSandboxes"];
        put?: never;
        /** Creates a sandbox from a template. */
        post: operations["e2bCreateSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** E2B's deprecated v1 list: the tenant's running (Sandglass: starting or running) sandboxes, all at once, as GET /v2/sandboxes with state=running would list them without paging. */
        get: operations["e2bListSandboxesV1"];
        put?: never;
        /** The create of the 2.x releases before 2.51, which always send `allow_internet_access: true` and `secure: true`: the same create as POST /v2/sandboxes, except that `allow_internet_access: true` is the default policy here. */
        post: operations["e2bCreateSandboxV1"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description The newest sample of each of the named sandboxes that is the tenant's, running, and has one (the same series as GET /sandboxes/{sandboxID}/metrics); ids that are unknown, another tenant's, paused or ended are left out, as E2B lists only running sandboxes here. */
        get: operations["e2bGetSandboxesMetrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}/connect": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description The connect of the 2.x releases before 2.51; the same as POST /v2/sandboxes/{sandboxID}/connect. */
        post: operations["e2bConnectSandboxV1"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get: operations["e2bGetSandbox"];
        put?: never;
        post?: never;
        delete: operations["e2bKillSandbox"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}/metrics": {
        parameters: {
            query?: {
                /** @description Unix seconds: only samples at or after it */
                start?: number;
                /** @description Unix seconds: only samples at or before it (the whole second) */
                end?: number;
            };
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        /** @description The running sandbox's samples over the last hour, one every 5 s (Sandglass's GET /v1/sandboxes/{id}/metrics on its gateway, in E2B's shape). */
        get: operations["e2bGetMetrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}/timeout": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Moves the expiry to now + timeout seconds (longer or shorter). */
        post: operations["e2bSetTimeout"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}/pause": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Snapshots the sandbox (memory included) and releases its VM; 409 when it is already paused. */
        post: operations["e2bPauseSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}/resume": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Resumes a paused sandbox from its latest snapshot; 409 when it runs. */
        post: operations["e2bResumeSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v2/sandboxes/{sandboxID}/connect": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description A running sandbox answers 200 with a fresh envd token, its expiry moved to now + timeout if that is later (never earlier); a paused one is resumed from its latest snapshot (memory intact, or with `memory: false` booted over its disk) and answers 201. */
        post: operations["e2bConnectSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}/fork": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Starts `count` sandboxes from a snapshot of this one taken now (a paused one: its pause snapshot); one entry per requested fork, each a sandbox or the error that kept it from starting. */
        post: operations["e2bForkSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}/network": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get?: never;
        /** @description Replaces the egress rules of a running sandbox; omitted lists are cleared. */
        put: operations["e2bSetNetwork"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sandboxes/{sandboxID}/snapshots": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description A Sandglass snapshot of the running sandbox taken now and kept: named (`name`, else its own id), so retention never thins it. Create a sandbox from it with its id or name as templateID (a fork of it). */
        post: operations["e2bCreateSnapshot"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/snapshots": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The tenant's named snapshots, newest first, one page at a time. */
        get: operations["e2bListSnapshots"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/templates": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description The templates the tenant can start: the platform's (public) and its own (one entry per name, its newest version; not public), by name. `teamID` is accepted and ignored: a key belongs to one tenant. */
        get: operations["e2bListTemplates"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/templates/{templateID}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                templateID: string;
            };
            cookie?: never;
        };
        /** @description One template by id or name, with its builds: a platform template has one; a tenant template has one per version, newest first, each build's id the version's id. 404 (`template_not_found`) when the tenant has none such. `limit`/`nextToken` page the builds. */
        get: operations["e2bGetTemplate"];
        put?: never;
        post?: never;
        /** @description What the SDK's deleteSnapshot calls: deletes the tenant's named snapshot of that id or name (forks already started from it keep running); 404 when there is none. A template answers 400: templates are not deleted here. */
        delete: operations["e2bDeleteSnapshot"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/templates/aliases/{alias}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                alias: string;
            };
            cookie?: never;
        };
        /** @description The template of that name (what the SDK's Template.exists asks); 404 when there is none. A platform template (every tenant may start it) is `public`, and so is one the operator published for every tenant; one of the caller's tenant's own templates is not, unless it is the published one. */
        get: operations["e2bGetTemplateAlias"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /**
         * @description A platform template being built is `building`, one whose build failed `error`; a tenant version is always `ready`.
         * @enum {string}
         */
        TemplateBuildStatus: "building" | "waiting" | "ready" | "error";
        Template: {
            /** @description A platform template's id, or a tenant template's newest version's id (as Template.exists answers). */
            templateID: string;
            /** @description The newest build: the same id (Sandglass builds are its versions). */
            buildID: string;
            cpuCount: number;
            memoryMB: number;
            /** @description 0: the image plus 1 GiB free (as in getInfo); else the size the version was built with. */
            diskSizeMB: number;
            /** @description true for the platform's templates, which every tenant may start. */
            public: boolean;
            aliases: string[];
            names: string[];
            /** Format: date-time */
            createdAt: string;
            /**
             * Format: date-time
             * @description When its newest build was made.
             */
            updatedAt: string;
            createdBy: null;
            /**
             * Format: date-time
             * @description The tenant's newest sandbox from it, ended ones included.
             */
            lastSpawnedAt: string | null;
            /** @description The tenant's sandboxes from it, ended ones included. */
            spawnCount: number;
            buildCount: number;
            envdVersion: string;
            buildStatus: components["schemas"]["TemplateBuildStatus"];
        };
        TemplateBuild: {
            buildID: string;
            status: components["schemas"]["TemplateBuildStatus"];
            /** Format: date-time */
            createdAt: string;
            /** Format: date-time */
            updatedAt: string;
            /** Format: date-time */
            finishedAt?: string;
            cpuCount: number;
            memoryMB: number;
            diskSizeMB?: number;
            envdVersion?: string;
        };
        TemplateWithBuilds: {
            templateID: string;
            public: boolean;
            aliases: string[];
            names: string[];
            /** Format: date-time */
            createdAt: string;
            /** Format: date-time */
            updatedAt: string;
            /** Format: date-time */
            lastSpawnedAt: string | null;
            spawnCount: number;
            builds: components["schemas"]["TemplateBuild"][];
        };
        SandboxMetric: {
            /** Format: date-time */
            timestamp: string;
            timestampUnix: number;
            cpuCount: number;
            cpuUsedPct: number;
            memUsed: number;
            memTotal: number;
            memCache: number;
            diskUsed: number;
            diskTotal: number;
        };
        Error: {
            /** @description The HTTP status. */
            code: number;
            message: string;
            error_code?: string;
        };
        /** @enum {string} */
        SandboxState: "running" | "paused";
        StringMap: {
            [key: string]: string;
        };
        NetworkList: string[];
        NewSandboxV2: {
            /** @description A template id or name. */
            templateID: string;
            /**
             * @description Seconds until the sandbox is killed.
             * @default 300
             */
            timeout: number;
            metadata?: components["schemas"]["StringMap"];
            /** @description Sandbox-wide environment variables (Sandglass `envs`); the egress variables win over the same names. */
            envVars?: components["schemas"]["StringMap"];
            /** @description false (or absent): the network is what `network.allowOut` allows, nothing else. On POST /v2/sandboxes true would open every host, which Sandglass's egress policy does not allow: it answers 400; list the hosts in `network.allowOut`. On POST /sandboxes (v1), whose SDK releases send true unless told otherwise, true is the default policy: the same as false. */
            allow_internet_access?: boolean;
            network?: components["schemas"]["SandboxNetworkConfig"];
            /** @description true: the timeout pauses the sandbox (Sandglass onTimeout: pause) instead of killing it. */
            autoPause?: boolean;
            /** @description false (only with autoPause true, and not with autoResume): the timeout's pause keeps the disk alone (Sandglass onTimeoutKeepMemory false), so the next connect boots the guest over it. Absent: true. */
            autoPauseMemory?: boolean;
            autoResume?: {
                /** @description true: while paused, a request to its envd or a guest port with its access token resumes it (Sandglass autoResume). */
                enabled: boolean;
            };
            /** @description Not supported when set. */
            mcp?: Record<string, unknown> | null;
            /** @description Not supported. */
            iam?: Record<string, unknown>;
            /** @description Not supported when non-empty. */
            volumeMounts?: {
                name: string;
                path: string;
            }[];
            /** @description Ignored in the safe direction; envd calls always need the access token. */
            secure?: boolean;
        };
        SandboxTimeoutRequest: {
            timeout: number;
        };
        SandboxPauseRequest: {
            /** @description false: a disk-only pause (Sandglass keepMemory false); the next connect boots the guest over its disk. */
            memory?: boolean;
        };
        ResumedSandbox: {
            /** @default 300 */
            timeout: number;
            /** @description Only false. */
            autoPause?: boolean;
            /** @description false (the SDK's onResume 'reboot'): a paused sandbox is booted over its snapshot's disk, its memory dropped (Sandglass resume coldBoot); no effect on a running one. */
            memory?: boolean;
        };
        ConnectSandboxV2: {
            /** @default 300 */
            timeout: number;
            /** @description false (the SDK's onResume 'reboot'): a paused sandbox is booted over its snapshot's disk, its memory dropped (Sandglass resume coldBoot); no effect on a running one. */
            memory?: boolean;
        };
        SandboxForkRequest: {
            /** @default 1 */
            count: number;
            /**
             * @description Seconds each fork lives; Sandglass's fork default (E2B's own is 15).
             * @default 300
             */
            timeout: number;
        };
        SandboxNetworkConfig: {
            /** @description Each a host name (`example.com`: ports 80 and 443), a wildcard (`*.example.com`), an IP address or an IP's /32 (/128) CIDR (every port). Wider CIDRs answer 400 naming the entry. */
            allowOut?: components["schemas"]["NetworkList"];
            /** @description IP addresses or their /32 (/128) CIDRs become deny rules, unless allowOut names the same address (allowOut wins, as in E2B); `0.0.0.0/0` and `::/0` are what Sandglass does anyway. Other entries answer 400. */
            denyOut?: components["schemas"]["NetworkList"];
            /** @description false is what Sandglass does anyway (a guest port needs a credential; the answer's trafficAccessToken is one). true answers 400 naming the field: ports are made public one by one through Sandglass's own API. */
            allowPublicTraffic?: boolean;
            /** @description Not supported. */
            maskRequestHost?: string;
            /** @description Not supported when set. */
            egressProxy?: Record<string, unknown> | null;
            /** @description Not supported when non-empty. */
            httpsPorts?: number[];
            /** @description Not supported when non-empty. */
            rules?: Record<string, unknown>;
        };
        SandboxNetworkUpdateConfig: {
            /** @description As on create. */
            allow_internet_access?: boolean;
            allowOut?: components["schemas"]["NetworkList"];
            denyOut?: components["schemas"]["NetworkList"];
            /** @description Not supported when set. */
            egressProxy?: Record<string, unknown> | null;
            /** @description Not supported when non-empty. */
            rules?: Record<string, unknown>;
        };
        Sandbox: {
            sandboxID: string;
            templateID: string;
            /** @description The template's name. */
            alias?: string;
            /** @description Always `sandglass`. */
            clientID: string;
            envdVersion: string;
            /** @description A Sandglass access token for this sandbox's data plane */
            envdAccessToken?: string;
            /** @description Opens this sandbox's guest ports (sent as the e2b-traffic-access-token header) and nothing else; expires with envdAccessToken and with the API key behind it. */
            trafficAccessToken?: string;
            /** @description The gateways' guest-port domain with the gateway's port (`sandglass.localhost:7071`), so the SDK's getHost(port) is `<port>-<id>.<domain>`, the gateway's host-name form of that port; null where the control plane is not told the domain (SANDGLASS_PORT_DOMAIN). envd is still reached through E2B_SANDBOX_URL. */
            domain?: string | null;
        };
        ListedSandbox: {
            sandboxID: string;
            templateID: string;
            alias?: string;
            clientID: string;
            /** Format: date-time */
            startedAt: string;
            /**
             * Format: date-time
             * @description When the sandbox expires.
             */
            endAt: string;
            cpuCount: number;
            memoryMB: number;
            diskSizeMB: number;
            envdVersion: string;
            state: components["schemas"]["SandboxState"];
            metadata?: {
                [key: string]: string;
            };
            volumeMounts?: unknown[];
        };
        SandboxDetail: {
            sandboxID: string;
            templateID: string;
            alias?: string;
            clientID: string;
            /** Format: date-time */
            startedAt: string;
            /** Format: date-time */
            endAt: string;
            cpuCount: number;
            memoryMB: number;
            diskSizeMB: number;
            envdVersion: string;
            /** @description Present while the sandbox runs. */
            envdAccessToken?: string;
            /** @description As in Sandbox; null while paused. */
            domain?: string | null;
            state: components["schemas"]["SandboxState"];
            metadata?: {
                [key: string]: string;
            };
            /** @description The Sandglass egress rules in force, in Sandglass's rule grammar. */
            network?: {
                allowOut: string[];
                denyOut: string[];
            };
            lifecycle?: {
                /** @enum {string} */
                onTimeout: "kill" | "pause";
                autoResume: boolean;
                /** @description Sandglass's addition (the SDK reads only the two above): false when the timeout's pause keeps the disk alone. */
                keepMemory: boolean;
            };
            volumeMounts?: unknown[];
        };
        SnapshotInfo: {
            /** @description `snap_…`, usable as templateID on create. */
            snapshotID: string;
            /** @description Its Sandglass name */
            names: string[];
        };
        /** @description Exactly one of sandbox and error. */
        SandboxForkResult: {
            sandbox?: components["schemas"]["Sandbox"];
            error?: components["schemas"]["Error"];
        };
    };
    responses: {
        /** @description Every error: `code` is the HTTP status (what the SDK reads), `error_code` Sandglass's stable code from spec/errors.yaml when there is one. */
        Error: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Error"];
            };
        };
    };
    parameters: {
        sandboxID: string;
    };
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    e2bListSandboxes: {
        parameters: {
            query?: {
                limit?: number;
                /** @description The `X-Next-Token` of the previous page; opaque. */
                nextToken?: string;
                /** @description `running` (Sandglass: starting or running), `paused`; comma-separated. Default: both. */
                state?: components["schemas"]["SandboxState"][];
                /** @description `k=v&k2=v2`, each key and value percent-encoded; every pair must match. */
                metadata?: string;
                /** @description By start time (then id). */
                order?: "asc" | "desc";
                startedAfter?: string;
                /** @description A template id or name. */
                template?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page; `X-Next-Token` is present when another follows. */
            200: {
                headers: {
                    "X-Next-Token"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ListedSandbox"][];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bCreateSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["NewSandboxV2"];
            };
        };
        responses: {
            /** @description Running */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bListSandboxesV1: {
        parameters: {
            query?: {
                /** @description `k=v&k2=v2`, each key and value percent-encoded; every pair must match. */
                metadata?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Newest first. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ListedSandbox"][];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bCreateSandboxV1: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["NewSandboxV2"];
            };
        };
        responses: {
            /** @description Running */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bGetSandboxesMetrics: {
        parameters: {
            query: {
                /** @description Comma-separated sandbox ids. */
                sandbox_ids: string[];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description By sandbox id. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        sandboxes: {
                            [key: string]: components["schemas"]["SandboxMetric"];
                        };
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bConnectSandboxV1: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ConnectSandboxV2"];
            };
        };
        responses: {
            /** @description Running already */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            /** @description Resumed */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bGetSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The sandbox; ended, failed and unknown sandboxes answer 404. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SandboxDetail"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bKillSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Killed */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    e2bGetMetrics: {
        parameters: {
            query?: {
                /** @description Unix seconds: only samples at or after it */
                start?: number;
                /** @description Unix seconds: only samples at or before it (the whole second) */
                end?: number;
            };
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Oldest first. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SandboxMetric"][];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bSetTimeout: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SandboxTimeoutRequest"];
            };
        };
        responses: {
            /** @description Set */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    e2bPauseSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["SandboxPauseRequest"];
            };
        };
        responses: {
            /** @description Paused */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    e2bResumeSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ResumedSandbox"];
            };
        };
        responses: {
            /** @description Running again */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bConnectSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ConnectSandboxV2"];
            };
        };
        responses: {
            /** @description Running already */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            /** @description Resumed */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bForkSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["SandboxForkRequest"];
            };
        };
        responses: {
            /** @description One result per requested fork */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SandboxForkResult"][];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bSetNetwork: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SandboxNetworkUpdateConfig"];
            };
        };
        responses: {
            /** @description Replaced */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    e2bCreateSnapshot: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                sandboxID: components["parameters"]["sandboxID"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": {
                    name?: string;
                };
            };
        };
        responses: {
            /** @description Taken */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SnapshotInfo"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bListSnapshots: {
        parameters: {
            query?: {
                sandboxID?: string;
                name?: string;
                limit?: number;
                /** @description The `X-Next-Token` of the previous page; opaque. */
                nextToken?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page; `X-Next-Token` is present when another follows. */
            200: {
                headers: {
                    "X-Next-Token"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SnapshotInfo"][];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bListTemplates: {
        parameters: {
            query?: {
                teamID?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description By name, the platform's first. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Template"][];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bGetTemplate: {
        parameters: {
            query?: {
                limit?: number;
                /** @description The `X-Next-Token` of the previous page; opaque. */
                nextToken?: string;
            };
            header?: never;
            path: {
                templateID: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The template; `X-Next-Token` is present when more builds follow. */
            200: {
                headers: {
                    "X-Next-Token"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateWithBuilds"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    e2bDeleteSnapshot: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                templateID: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Deleted */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    e2bGetTemplateAlias: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                alias: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The template */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        templateID: string;
                        public: boolean;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
}

// GENERATED from spec/control-plane.yaml by scripts/gen.ts (openapi-typescript). Do not edit by hand: run `npm run gen`.

export interface paths {
    "/v1/health": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Liveness; needs no API key. */
        get: operations["getHealth"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/templates": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Templates a sandbox can be created from. */
        get: operations["listTemplates"];
        put?: never;
        /**
         * Makes a snapshot of the tenant's the newest version of a custom template (the name is created on first use).
         * @description The snapshot becomes immutable template data: it is pinned, cannot be renamed or deleted through /v1/snapshots while a version holds it, and every sandbox created from the template forks it (on any node; it stays sealed under the tenant's key). With `buildId` the build must be the one running for this name, and it ends `ready` with this version; without it, a build running for the name refuses the call (template_build_in_progress).
         */
        post: operations["createTemplateVersion"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/templates/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                name: string;
            };
            cookie?: never;
        };
        /** A template with its versions, newest first (custom templates of the caller's tenant, or a platform template). */
        get: operations["getTemplate"];
        put?: never;
        post?: never;
        /** Deletes a custom template's versions (one with `version`); sandboxes and snapshots made from them keep working. */
        delete: operations["deleteTemplate"];
        options?: never;
        head?: never;
        /**
         * Sets a custom template's warm pool size, or (operator keys) publishes it for every tenant.
         * @description `warmPoolSize` VMs restored from the newest version's snapshot are kept warmed on one node, bound to no sandbox; a create from the template takes one (its `sandbox.started` event says `pooled: true`). A new version replaces the pool, deleting the template drains it, 0 turns it off. Pooled VMs count against the node's guest memory as running sandboxes do, so a node with less room keeps fewer. `public: true` publishes the template for every tenant (only an `operator` key may set it, on a template of its own tenant; any other key gets `permission_denied` naming the field): every tenant then lists it, reads its versions and creates sandboxes from it by name or `tpl_…` id, and none but its own tenant may change or delete it. A tenant's own template of the same name wins over a published one. `public: false` withdraws it: creates from it by other tenants are refused from then on, their sandboxes made from it stay theirs.
         */
        patch: operations["updateTemplate"];
        trace?: never;
    };
    "/v1/template-cache/{key}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                key: string;
            };
            cookie?: never;
        };
        /**
         * The snapshot a build step with this key produced before, while that snapshot exists and the step is cached (builds reuse it).
         * @description A look-up is a use: the tenant's step cache keeps a bounded number of steps and evicts the least recently used first, never one used since the oldest of the tenant's running builds began.
         */
        get: operations["getTemplateCacheEntry"];
        /** Records the snapshot of the tenant's a build step with this key produced; the snapshot is pinned. */
        put: operations["putTemplateCacheEntry"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/template-builds": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The tenant's template builds, newest first (of one template with `name`). */
        get: operations["listTemplateBuilds"];
        put?: never;
        /**
         * Opens a build of a template name; one runs per name at a time (a second answers template_build_in_progress).
         * @description The builder (the SDK's Template.build, the CLI's `template build`) reports its steps and output to the build and publishes the result with POST /v1/templates and the build's id. A build not reported to for 60 s is stale: it ends failed and the name is free again.
         */
        post: operations["startTemplateBuild"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/template-builds/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get: operations["getTemplateBuild"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/template-builds/{id}/log": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        /** The build's log lines from `fromLine` on (at most 1000 per answer). */
        get: operations["readTemplateBuildLog"];
        put?: never;
        /** Appends output lines and step progress to a running build (and keeps it from going stale). */
        post: operations["reportTemplateBuild"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/template-builds/{id}/fail": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Ends a running build as failed, naming the step; nothing is published. */
        post: operations["failTemplateBuild"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The caller's tenant's sandboxes, newest first. */
        get: operations["listSandboxes"];
        put?: never;
        /**
         * Creates a sandbox by restoring a template's snapshot on a gateway.
         * @description Answers once the sandbox runs; the response alone carries `access` for the data plane. An empty body takes every default.
         */
        post: operations["createSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get: operations["getSandbox"];
        put?: never;
        post?: never;
        /** Kills the sandbox; a sandbox that already ended answers 204 too. */
        delete: operations["killSandbox"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/timeout": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Moves the expiry to now + timeoutS (longer or shorter). */
        post: operations["setSandboxTimeout"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/access": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** A fresh short-lived (15 min) data-plane token for the sandbox's gateway. */
        post: operations["createSandboxAccess"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/events": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        /** The sandbox's events in log order. */
        get: operations["listSandboxEvents"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/audit/export": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        /**
         * The sandbox's events as a signed audit export that verifies offline.
         * @description JSON lines (spec/audit-export.md): a header, each of the sandbox's events as GET /v1/sandboxes/{id}/events serves them, in log order, and a trailer signed with the deployment's Ed25519 audit key (GET /v1/audit/public-key). Streamed; events appended meanwhile are left out. `sandglass events verify` checks it without a server. Another tenant's sandbox answers sandbox_not_found, as for its events.
         */
        get: operations["exportSandboxAudit"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/audit/public-key": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The public key audit exports are signed with; needs no API key.
         * @description The deployment's Ed25519 audit key (one for every tenant, created on first use, its private half sealed under the keyring's master key). Publish it: auditors verify exports with it.
         */
        get: operations["getAuditPublicKey"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/network": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        /**
         * Replaces the egress policy of a running sandbox (the gateway applies it to new connections at once).
         * @description Rules as in CreateSandboxRequest.network; a malformed or too broad rule answers `policy_invalid` with `details.field` naming it (`network.allow[1]`). Records `sandbox.network_changed`. Running only, else `sandbox_not_running`.
         */
        put: operations["setSandboxNetwork"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/approvals": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        /**
         * Requests the sandbox's egress holds until someone approves using a secret in them (approval required).
         * @description Only a running sandbox can have any; the others answer an empty list.
         */
        get: operations["listApprovals"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{requestId}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                requestId: components["schemas"]["ApprovalRequestId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Approves or denies a pending request; an approval with ttlS also lets later uses of the secret by the sandbox pass until then.
         * @description A request already decided, timed out or withdrawn, or one of a sandbox that no longer runs, answers `approval_not_found`.
         */
        post: operations["decideApproval"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/secrets": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The tenant's secrets, by name; never their values. */
        get: operations["listSecrets"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/secrets/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                name: components["schemas"]["SecretName"];
            };
            cookie?: never;
        };
        get?: never;
        /**
         * Creates or replaces a secret; the value is sealed under the tenant's key and never shown again.
         * @description A sandbox created with `secrets: [NAME]` sees an environment variable NAME holding a placeholder; the egress gateway puts the value in place of the placeholder only on requests to `hosts` (and, with `header`, adds that header to each of them). Records `secret.set` without the value.
         */
        put: operations["putSecret"];
        post?: never;
        /** Removes a secret; sandboxes bound to it can no longer use it. Records `secret.removed`. */
        delete: operations["deleteSecret"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/snapshot-interval": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Sets how often the gateway takes a rolling snapshot of the sandbox (from now on; a paused sandbox uses it once resumed). */
        post: operations["setSnapshotInterval"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/snapshots": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        /** The sandbox's timeline, the retained snapshots oldest first (also once the sandbox has ended), and its snapshot cadence. */
        get: operations["listSnapshots"];
        put?: never;
        /** Takes a snapshot of the running sandbox now; a named one is pinned (retention never thins it). */
        post: operations["takeSnapshot"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/pause": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Snapshots the running sandbox (reason pause) and releases its VM; resume brings it back.
         * @description By default the snapshot is the whole VM (memory, devices, disk): the resume continues its processes where they were. With `keepMemory: false` only its disk is kept (the guest first syncs its files): the snapshot is smaller and quicker to take, and the resume boots the guest over that disk, so files are there but processes are not; its environment, user and workdir, network policy, secrets and public ports are kept. Its events say `memory: false` (sandbox.paused, snapshot.taken) and `coldBoot: true` (sandbox.resumed). A pause asked for while another of the same sandbox is in flight (a retry, or its timeout's pause) answers with that pause's snapshot; one asking otherwise about `keepMemory` is refused with `conflict` naming the field.
         */
        post: operations["pauseSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/resume": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Runs a paused sandbox again, under the same id, from one of its snapshots.
         * @description From `snapshotId` (one of this sandbox's), or the latest snapshot taken at or before `at`, or (neither) its latest snapshot. Only a paused sandbox resumes: a running one answers `sandbox_running`, an ended one `sandbox_not_running` (fork it instead). Like create, the response alone carries `access`.
         */
        post: operations["resumeSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/snapshots/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get: operations["getSnapshot"];
        put?: never;
        post?: never;
        /** Deletes the snapshot (pinned or not); sandboxes already forked from it are not affected. */
        delete: operations["deleteSnapshot"];
        options?: never;
        head?: never;
        /**
         * Names, renames or (null) unnames the snapshot; a named one is pinned, an unnamed one is thinned by retention again.
         * @description Recorded as `snapshot.named` (`snapshotId`, `name`, `previousName`). The name follows the rules of a name given at capture; a snapshot of an ended sandbox can be named as long as retention has not thinned it.
         */
        patch: operations["nameSnapshot"];
        trace?: never;
    };
    "/v1/forks": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Starts `count` new sandboxes from one snapshot.
         * @description Exactly one of `snapshotId` or `sandboxId`; with `sandboxId`, `at` picks its latest snapshot taken at or before that time, and without `at` its latest snapshot. Each fork gets its own id, disk and memory, the source's shape and snapshot interval, and `sourceSnapshotId`. The response lists the forks that started, each with `access`; when none did, the first failure is the error.
         */
        post: operations["forkSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/nodes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The cluster's nodes (operator keys only): every node enrolled or heard from, its credential's state and its membership. Never a key or token. */
        get: operations["listNodes"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/nodes/enrolments": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Issues a one-time enrolment token for one node id (operator keys only), shown in this response only. The node spends it once (`sandglass gateway --enrol-token`) for a key bound to that id; enrolling an id again replaces its key. */
        post: operations["createNodeEnrolment"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/nodes/{id}/revoke": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Revokes a node's key (operator keys only): refused from its next request, the node declared dead at once so its sandboxes fail over as a dead node's. Revoking a revoked node changes nothing. A new enrolment brings it back. */
        post: operations["revokeNode"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tenants": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Creates a tenant (operator keys only); then give it its first admin key with createApiKey. */
        post: operations["createTenant"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tenants/{id}/api-keys": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Creates an API key for the tenant {id}; the key is shown in this response only. An admin key may do this for its own tenant only (another tenant answers tenant_not_found, as an unknown id), and never for an operator key (permission_denied); an operator key for any tenant; a member key never (permission_denied). */
        post: operations["createApiKey"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/api-keys": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The API keys of a tenant (the caller's own by default), oldest first, revoked and expired ones included: metadata only, never a key or its hash. Admin keys see their own tenant only; operator keys any; member keys none. */
        get: operations["listApiKeys"];
        put?: never;
        /** As createApiKey, for tenantId or, without it, the caller's own tenant; the key is shown in this response only. */
        post: operations["createApiKeyInTenant"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tenants/{id}/keys": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        /** The tenant's key provider, its data key versions and when one was last used (operator keys only); never a key, a wrapped key or a PIN. */
        get: operations["getTenantKeys"];
        /** Registers the tenant's key provider (operator keys only): the built-in keyring, or the tenant's own PKCS#11 HSM, proven by wrapping the tenant's first data key with it. A tenant that already has keys under another provider answers conflict; the same provider again changes nothing. */
        put: operations["setTenantKeyProvider"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tenants/{id}/keys/rotate": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** A new data key version for the tenant's new writes (operator keys only). Older versions stay readable, wrapped again under the provider's key (`key` names a new HSM key to move them under); no chunk is re-encrypted. */
        post: operations["rotateTenantKey"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tenants/{id}/keys/revoke": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Revokes the tenant's key for good (operator keys only): its wrapped data keys are destroyed, every gateway stops the tenant's running sandboxes and wipes its plaintext, and from then on create, resume and fork answer key_revoked. Its snapshots, manifests and secrets stay on disk, readable by no one. */
        post: operations["revokeTenantKey"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/api-keys/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /** Revokes a key: from the next request on it answers api_key_revoked, and api_key.revoked is recorded with the revoking key's id. Access tokens it obtained before stay valid until they expire (at most 15 minutes). Revoking a revoked key changes nothing. A key of another tenant answers api_key_not_found to an admin key, as an unknown id; an operator key can be revoked only by an operator key. */
        delete: operations["revokeApiKey"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        Health: {
            /** @constant */
            status: "ok";
            version: string;
        };
        AuditPublicKey: {
            /** @constant */
            algorithm: "ed25519";
            /** @description What an export trailer names: the first 32 hex digits of sha256 over the SPKI DER. */
            keyId: string;
            /** @description SPKI PEM. */
            publicKeyPem: string;
        };
        Template: {
            /** @description A platform template's id, or a custom template's newest version (`tpl_…`). */
            id: string;
            name: string;
            /** @enum {string} */
            status: "ready" | "building" | "failed";
            /** @description Guest memory the template was snapshotted with. */
            memoryMib: number;
            /** Format: date-time */
            createdAt: string;
            /** @description A template of the tenant (built or promoted from a snapshot), not a platform one. */
            custom?: boolean;
            vcpus?: number;
            diskMib?: number | null;
            /** @description The newest version's number (custom templates). */
            version?: number;
            /** @description Warmed VMs of the newest version kept for creates (custom templates; 0: none). */
            warmPoolSize?: number;
            /** @description Warmed VMs of the pool ready to hand out now, as the pool's node reports them (custom templates, in GET /v1/templates/{name} only; null when that node cannot be asked now). Below warmPoolSize while the pool fills, after a burst of creates, or on a node short of memory. */
            warmPoolReady?: number | null;
            /** @description Published by the operator for every tenant (custom templates): every tenant lists it and creates from it. */
            public?: boolean;
            /** @description Another tenant's template published for every tenant (the platform's): usable, never changed or deleted by this key. */
            readOnly?: boolean;
        };
        /** @description Lower-case letters, digits, '.', '_' and '-'; a platform template's name (base) cannot be taken. */
        TemplateName: string;
        TemplateStart: {
            /** @description Started before the final snapshot: every sandbox wakes with it running. */
            cmd: string;
            /** @description Who it ran as. */
            user?: string;
            /** @description Where it ran. */
            workdir?: string;
            /** @description The check that had to exit 0 before the snapshot was taken. */
            ready?: {
                cmd: string;
                timeoutS: number;
                intervalMs: number;
            };
        };
        CreateTemplateVersionRequest: {
            name: components["schemas"]["TemplateName"];
            /** @description A snapshot of the caller's tenant. */
            snapshotId: string;
            envs?: components["schemas"]["Envs"];
            user?: string | null;
            workdir?: string | null;
            start?: components["schemas"]["TemplateStart"] | null;
            buildId?: string;
        };
        TemplateVersion: {
            /** @description `tpl_…`: creating from it takes this version, not the newest. */
            id: string;
            name: string;
            version: number;
            snapshotId: string;
            memoryMib: number;
            vcpus: number;
            diskMib: number | null;
            envs: components["schemas"]["Envs"];
            user: string | null;
            workdir: string | null;
            start: components["schemas"]["TemplateStart"] | null;
            buildId: string | null;
            /** Format: date-time */
            createdAt: string;
        };
        TemplateDetail: {
            template: components["schemas"]["Template"];
            versions: components["schemas"]["TemplateVersion"][];
        };
        TemplateCacheEntry: {
            key: string;
            snapshotId: string;
            /** Format: date-time */
            createdAt: string;
        };
        /** @enum {string} */
        TemplateBuildStatus: "running" | "ready" | "failed";
        TemplateBuildStep: {
            index: number;
            name: string;
            /** @enum {string} */
            status: "running" | "cached" | "done" | "failed";
            durationMs?: number;
        };
        TemplateBuildError: {
            message: string;
            /** @description The index of the step that failed. */
            step?: number;
        };
        TemplateBuild: {
            /** @description `bld_…` */
            id: string;
            name: string;
            status: components["schemas"]["TemplateBuildStatus"];
            /** Format: date-time */
            startedAt: string;
            /** Format: date-time */
            finishedAt: string | null;
            steps: components["schemas"]["TemplateBuildStep"][];
            versionId: string | null;
            error: components["schemas"]["TemplateBuildError"] | null;
        };
        TemplateBuildLine: {
            n: number;
            /** Format: date-time */
            at: string;
            /** @enum {string} */
            stream: "stdout" | "stderr" | "info";
            text: string;
        };
        TemplateBuildReport: {
            lines?: {
                /** @enum {string} */
                stream: "stdout" | "stderr" | "info";
                text: string;
            }[];
            step?: components["schemas"]["TemplateBuildStep"];
        };
        /** @enum {string} */
        SandboxState: "starting" | "running" | "paused" | "ended" | "failed";
        /** @description Free-form labels, at most 32 string entries. */
        Metadata: {
            [key: string]: string;
        };
        CreateSandboxRequest: {
            /**
             * @description Template name or id.
             * @default base
             */
            template: string;
            /** @default 256 */
            memoryMib: number;
            /** @default 1 */
            vcpus: number;
            /**
             * @description Seconds from start until the sandbox is ended.
             * @default 300
             */
            timeoutS: number;
            metadata?: components["schemas"]["Metadata"];
            /**
             * @description Seconds between rolling snapshots.
             * @default 60
             */
            snapshotIntervalS: number;
            /**
             * @description Take snapshotIntervalS even when the node has measured that one snapshot of this VM size takes longer (without it, that answers `snapshot_interval_unachievable` with `details.minimumS`); late snapshots are then reported as snapshot.behind.
             * @default false
             */
            snapshotBestEffort: boolean;
            /** @description The egress policy; absent, the sandbox has no network at all. A malformed or too broad rule ('*', '*.com', a bad port) answers `policy_invalid` with `details.field` naming it (`network.allow[1]`). */
            network?: components["schemas"]["NetworkPolicyRequest"];
            /** @description Names of tenant secrets to bind; an unknown one answers `secret_not_found` naming `secrets[i]`. Without a network policy the placeholders exist but nothing can be reached to use them on. */
            secrets?: components["schemas"]["SecretName"][];
            envs?: components["schemas"]["Envs"];
            /** @description The root disk, in MiB: the sandbox's filesystem is grown online to at least this size before the create answers (absent: the template's own size, about 1 GiB free). Disks are thin: the node's storage holds only what the guest writes. Resumes and forks keep the size. */
            diskMib?: number;
            onTimeout?: components["schemas"]["OnTimeout"];
            /**
             * @description With `onTimeout: pause`, false makes the timeout's pause disk-only, as a pause with `keepMemory: false`: the guest syncs, its disk is kept and its memory dropped, so the resume boots it over that disk (files kept, processes gone). false with `onTimeout: kill` answers `invalid_argument` naming this field.
             * @default true
             */
            onTimeoutKeepMemory: boolean;
            /**
             * @description While paused (by its timeout or by a pause), a request to one of its guest ports or its E2B daemon that carries its access token or a signed port URL resumes it, and then proceeds; without it such a request answers `sandbox_paused`. Requests without a credential (a public port) never resume it.
             * @default false
             */
            autoResume: boolean;
        };
        /**
         * @description What happens at the timeout: kill ends the sandbox (sandbox.killed, reason timeout); pause snapshots it and releases its VM (sandbox.paused, reason timeout), keeping its rolling history and costing no RAM until it is resumed (if that snapshot fails, it is killed). Resumes keep the choice; forks start with kill.
         * @default kill
         * @enum {string}
         */
        OnTimeout: "kill" | "pause";
        /** @description Environment variables set for every process of the sandbox, kept for its life (resumes, moves) and inherited by its forks. The egress variables (HTTP_PROXY, the CA bundle paths …) and secret placeholders win over a variable of the same name. A value may not contain NUL, and all names and values together may not exceed 64 KiB (`invalid_argument` naming `envs.NAME`). Values are stored in the database, never in the event log (which records only the names); use secrets for credentials. */
        Envs: {
            [key: string]: string;
        };
        /** @description `host[:port] [METHOD] [/path-prefix]`: an exact host, `*.domain` (any subdomain), or an IP; the port defaults to 80 and 443 in allow rules and to every port in deny rules (`:*` is every port). Examples: `api.github.com`, `*.pypi.org`, `example.com:8443`, `api.github.com GET /repos`. An allow rule naming an internal IP (loopback, private, link-local, metadata, CGNAT …) answers `policy_invalid`: only the node's operator opens such destinations. A request whose path has an encoded / or \, a backslash, `//` or a dot segment is refused wherever a rule with a path applies to its host. */
        NetworkRule: string;
        /** @description Deny rules win; a destination no allow rule names is denied. */
        NetworkPolicyRequest: {
            allow?: components["schemas"]["NetworkRule"][];
            deny?: components["schemas"]["NetworkRule"][];
        };
        NetworkPolicy: {
            allow: string[];
            deny: string[];
        };
        /** @description An environment variable name (the sandbox sees the placeholder under it). */
        SecretName: string;
        /** @description Where the value may go, in the policy grammar without method or path ('api.github.com', '*.example.com', 'host:8443'); no port means 443 only. An internal IP (loopback, private, link-local …) answers `policy_invalid`. */
        SecretHost: string;
        PutSecretRequest: {
            /** @description At most 64 KiB of UTF-8; at least 4 characters, or it could not be kept out of recorded traffic. Never returned. */
            value: string;
            /** @description A rule that is malformed or too broad answers `policy_invalid` naming `hosts[i]`. */
            hosts: components["schemas"]["SecretHost"][];
            /** @description Add this header, as `format`, to every request to a scoped host (the value may then hold no control characters). */
            header?: string;
            /** @description Contains '{value}'; default '{value}'; only with header (e.g. 'Bearer {value}'). */
            format?: string;
            /** @description Media types whose request bodies are searched for the placeholder ('application/json', 'text/*'). */
            bodyContentTypes?: string[];
            /**
             * @description required: every use waits for POST /v1/approvals/{requestId}.
             * @default none
             * @enum {string}
             */
            approval: "none" | "required";
            /**
             * @description Also substitute the value into requests that go upstream in clear text (http://, or plain HTTP inside a CONNECT tunnel), where anyone on the path can read it. Default: only into requests sent over TLS whose certificate the proxy verified; a placeholder sent in clear text is blocked (`egress_secret_scope`).
             * @default false
             */
            allowPlaintext: boolean;
            /**
             * @description Also substitute the value into protocol-upgrade requests (WebSocket). After the upstream's 101 the proxy relays frames unread, so an upstream that echoes the value in a frame shows it to the sandbox. Default: a placeholder in an upgrade request is blocked (`egress_secret_scope`) and a configured header is not added.
             * @default false
             */
            allowUpgrade: boolean;
        };
        SecretInfo: {
            name: string;
            hosts: string[];
            header: string | null;
            /** @description Null without header. */
            format: string | null;
            bodyContentTypes: string[];
            /** @enum {string} */
            approval: "none" | "required";
            allowPlaintext: boolean;
            allowUpgrade: boolean;
            /** Format: date-time */
            createdAt: string;
            /** Format: date-time */
            updatedAt: string;
        };
        ApprovalRequestId: string;
        ApprovalRequest: {
            requestId: string;
            sandboxId: string;
            /** @description The secret's name. */
            secret: string;
            host: string;
            port: number;
            method: string;
            /** @description The path without the query. */
            path: string;
            /** Format: date-time */
            requestedAt: string;
            /**
             * Format: date-time
             * @description Denied unless decided by then.
             */
            expiresAt: string;
        };
        ApprovalDecisionRequest: {
            sandboxId: string;
            /** @enum {string} */
            decision: "approve" | "deny";
            /** @description With approve: later uses of this secret by the sandbox pass for this long. Absent: this request only. */
            ttlS?: number;
        };
        SnapshotName: string;
        SetSnapshotIntervalRequest: {
            snapshotIntervalS: number;
            /**
             * @description Take the interval even when one snapshot of the sandbox's VM size takes longer on its node (without it, that answers `snapshot_interval_unachievable` with `details.minimumS` and changes nothing).
             * @default false
             */
            bestEffort: boolean;
        };
        TakeSnapshotRequest: {
            name?: components["schemas"]["SnapshotName"];
            /** @description First drop the guest's page cache and zero its freed memory (at most 192 MiB of it), as a platform template's snapshot is prepared: the snapshot's RAM then holds only live pages, so it stores less and every fork of it (a custom template's version) copies less. Costs the guest its page cache. */
            compact?: boolean;
        };
        NameSnapshotRequest: {
            /** @description The new name, by the rules of SnapshotName; null removes it (and the pin that came with it). */
            name: string | null;
        };
        PauseSandboxRequest: {
            /**
             * @description false: keep the disk alone; the resume boots the guest (files kept, processes gone).
             * @default true
             */
            keepMemory: boolean;
        };
        /** @description At most one of `at` and `snapshotId`. */
        ResumeSandboxRequest: {
            /**
             * Format: date-time
             * @description Resume from the latest snapshot taken at or before this time.
             */
            at?: string;
            snapshotId?: string;
            /** @description true: boot the guest over the snapshot's disk instead of restoring its memory (what a disk-only snapshot always does): files are kept as last written to disk, processes are gone (sandbox.resumed says `coldBoot: true`). Absent or false: the snapshot's memory is restored when it has one. */
            coldBoot?: boolean;
        };
        /** @description Exactly one of `snapshotId` and `sandboxId`; `at` only with `sandboxId`. */
        ForkRequest: {
            snapshotId?: string;
            sandboxId?: string;
            /**
             * Format: date-time
             * @description The sandbox's latest snapshot taken at or before this time.
             */
            at?: string;
            /** @default 1 */
            count: number;
            /**
             * @description Seconds from start until each fork is ended.
             * @default 300
             */
            timeoutS: number;
            metadata?: components["schemas"]["Metadata"];
            /** @description The fork replays its source from the snapshot (`sandglass replay`): the guest's clock is the snapshot's time and its entropy the source's recorded one instead of fresh, its egress proxy answers only from the source's recorded exchanges after the snapshot and connects nowhere, and its data plane serves the source's recorded inputs (`/recording/{contentId}`). Its sandbox.forked event carries `replayOf`. */
            replay?: boolean;
            /** @description With `sandboxId` and `replay`: the fork starts from the moment its source was created, not from a snapshot: the source's template with the envs, network and secrets' placeholders it was created with, and the clock and entropy of its first sync (`sandglass replay --from creation`). The source must have been created from a template, not forked. The fork's sandbox.forked event has `snapshotId: null`. */
            fromCreation?: boolean;
        };
        /** @description How often the sandbox's snapshots are taken: asked for, and achieved over the last window (ten intervals, at most an hour unless one interval is longer, and only since it last started running or its interval changed). */
        SnapshotCadence: {
            /** @description Seconds between rolling snapshots asked for. */
            intervalS: number;
            /** @description The window over the snapshots taken in it; null while the sandbox is not running, before the window spans one interval, and when it holds none. */
            achievedIntervalS: number | null;
            /** @description The window's length in seconds (0 while not running). */
            windowS: number;
            /** @description Snapshots taken in the window (rolling */
            takenInWindow: number;
            /** @description The last of its snapshot.behind and snapshot.caught_up events is snapshot.behind, and it is running. */
            behind: boolean;
        };
        Snapshot: {
            /** @description `snap_…` */
            id: string;
            /** @description The sandbox it was taken of. */
            sandboxId: string;
            /** @description The snapshot it is a delta of; null for the first of a chain. */
            parentId: string | null;
            /** Format: date-time */
            takenAt: string;
            /** @enum {string} */
            reason: "rolling" | "manual" | "pause";
            name: string | null;
            /** @description Retention never thins a pinned snapshot (a named one is always pinned). */
            pinned: boolean;
            /** @description Bytes this snapshot added to the store (new chunks plus its manifest). */
            sizeAddedBytes: number;
            memoryMib: number;
            vcpus: number;
            template: string;
            /** @description false: disk-only (a pause with keepMemory false); resuming or forking it boots the guest over its disk. */
            memory: boolean;
        };
        PauseResponse: {
            sandbox: components["schemas"]["Sandbox"];
            snapshot: components["schemas"]["Snapshot"];
        };
        ForkResponse: {
            /** @description The snapshot the forks started from; null: their source's creation (fromCreation). */
            snapshotId: string | null;
            sandboxes: components["schemas"]["Sandbox"][];
        };
        SetTimeoutRequest: {
            timeoutS: number;
        };
        Access: {
            /** @description Base URL of the gateway's data plane for this sandbox. */
            gatewayUrl: string;
            /** @description Bearer token for the data plane (`sgat_…`), valid for this sandbox only. */
            token: string;
            /** Format: date-time */
            expiresAt: string;
        };
        Sandbox: {
            id: string;
            tenantId: string;
            template: string;
            state: components["schemas"]["SandboxState"];
            /**
             * @description Present once the state is ended.
             * @enum {string}
             */
            endReason?: "killed" | "timeout" | "shutdown";
            /** @description Present once the state is failed. */
            failureReason?: string;
            memoryMib: number;
            vcpus: number;
            timeoutS: number;
            metadata: {
                [key: string]: string;
            };
            /** Format: date-time */
            createdAt: string;
            /** Format: date-time */
            startedAt?: string;
            /** Format: date-time */
            endedAt?: string;
            /** Format: date-time */
            expiresAt: string;
            /** @description Seconds between rolling snapshots. */
            snapshotIntervalS: number;
            /** @description The snapshot a fork started from; null when created from a template. */
            sourceSnapshotId: string | null;
            /** @description The root disk size asked for at create (MiB), which forks inherit; null: the template's own. */
            diskMib: number | null;
            /**
             * Format: date-time
             * @description When the sandbox was paused; null unless the state is paused.
             */
            pausedAt: string | null;
            /** @description The node (gateway) the sandbox is placed on; it changes when the sandbox moves to another node. */
            gatewayId?: string | null;
            /** @description The egress policy in force; null when the sandbox has no network at all. */
            network: components["schemas"]["NetworkPolicy"] | null;
            /** @description Names of the tenant secrets bound to it. */
            secrets: string[];
            onTimeout: components["schemas"]["OnTimeout"];
            /** @description false: a pause at the timeout keeps the disk alone (its resume is a cold boot). */
            onTimeoutKeepMemory: boolean;
            /** @description A request with its credential to a port or daemon resumes it while paused. */
            autoResume: boolean;
            access?: components["schemas"]["Access"];
        };
        Event: {
            /** @description Position in the one log; increases */
            seq: number;
            id: string;
            /** @description sandbox.created, sandbox.started, sandbox.killed (data.reason), sandbox.failed (data.reason, data.consoleTail), sandbox.timeout, sandbox.extended, sandbox.paused (data.snapshotId; data.reason timeout when its timeout paused it), sandbox.resumed (data.trigger request when a request woke it), sandbox.forked, sandbox.configured, sandbox.network_changed (data.allow, data.deny), snapshot.taken, snapshot.failed, snapshot.deleted, snapshot.named, snapshot.behind (rolling snapshots fell more than half an interval behind: data.intervalS asked, data.achievedIntervalS over the last data.windowS, data.lateS, data.why slots_full, capture_slow or failing; once, until) snapshot.caught_up (data.behindForS), command.started, command.exited, file.written, file.removed, tenant.created, api_key.created, api_key.revoked, api_key.role_changed (data.keyId and the acting key's id, never a key), secret.set and secret.removed (tenant events: name, hosts, header, approval; never the value), and from the egress gateway egress.request, egress.exchange, egress.secret_scope, egress.rejected, secret.approval_requested, secret.approval_decided; gateways may add further command.*, file.* and egress.* types. */
            type: string;
            tenantId: string;
            sandboxId: string | null;
            /** Format: date-time */
            at: string;
            data: Record<string, unknown>;
            /** @description sha256 hex of prevHash + canonical JSON of the event without seq and hash. */
            hash: string;
            prevHash: string;
            /** @description The hash of the sandbox's previous event (64 zeros for its first): the sandbox's own chain, which an audit export verifies. Absent on events without a sandbox and on events written before it was introduced. */
            sandboxPrevHash?: string;
        };
        NodeInfo: {
            id: string;
            /**
             * @description enrolling: enrolled (or heard from) but not registered yet.
             * @enum {string}
             */
            state: "enrolling" | "alive" | "dead" | "revoked";
            /** @description Its data-plane URL as it last registered. */
            url: string | null;
            /** Format: date-time */
            enrolledAt: string | null;
            /** Format: date-time */
            revokedAt: string | null;
            /** Format: date-time */
            lastSeenAt: string | null;
        };
        Tenant: {
            id: string;
            name: string;
            /** Format: date-time */
            createdAt: string;
        };
        CreateTenantRequest: {
            name: string;
        };
        /** @description For pkcs11, module, token, key and pinFile are all required; for keyring, none may be given. */
        SetKeyProviderRequest: {
            /** @enum {string} */
            provider: "keyring" | "pkcs11";
            /** @description Path of the PKCS#11 module on the control plane's host. */
            module?: string;
            /** @description The token's label. */
            token?: string;
            /** @description Label of the AES key that wraps the tenant's data keys. */
            key?: string;
            /** @description Path of a file holding the user PIN; read at each login, never stored. */
            pinFile?: string;
        };
        TenantKeyStatus: {
            tenantId: string;
            /** @enum {string} */
            provider: "keyring" | "pkcs11";
            pkcs11?: {
                module: string;
                token: string;
                key: string;
            };
            /** @description The data key version new writes use. */
            currentVersion: number;
            versions: {
                version: number;
                /** @description Null for a keyring tenant's first key, made before versions were recorded. */
                createdAt: string | null;
            }[];
            /** @description When this control plane last handed out one of the tenant's keys. */
            lastUsedAt: string | null;
            revoked: boolean;
        };
        /**
         * @description member uses its tenant's sandboxes, secrets and snapshots; admin also manages its own tenant's member and admin keys; operator is the platform's role (the key `sandglass up` writes): it creates tenants, manages every tenant's keys, and acts in its own tenant for everything else.
         * @enum {string}
         */
        ApiKeyRole: "member" | "admin" | "operator";
        ApiKeyInfo: {
            id: string;
            tenantId: string;
            name?: string;
            role: components["schemas"]["ApiKeyRole"];
            /** @description The first characters of the key (`sg_` and 7 more), to tell keys apart. */
            prefix: string;
            /** Format: date-time */
            createdAt: string;
            /** @description The key that created it; null for the local operator key. */
            createdByKeyId: string | null;
            /**
             * Format: date-time
             * @description Refused from then on; null never expires.
             */
            expiresAt: string | null;
            /**
             * Format: date-time
             * @description Last authenticated request, to the minute.
             */
            lastUsedAt: string | null;
            /** Format: date-time */
            revokedAt: string | null;
        };
        ApiKey: {
            id: string;
            tenantId: string;
            name?: string;
            /** @description The secret key (`sg_…`); shown only in this response. */
            key: string;
            role: components["schemas"]["ApiKeyRole"];
            prefix: string;
            /** Format: date-time */
            createdAt: string;
            createdByKeyId: string | null;
            /** Format: date-time */
            expiresAt: string | null;
            /** Format: date-time */
            lastUsedAt: string | null;
            /** Format: date-time */
            revokedAt: string | null;
        };
        CreateApiKeyRequest: {
            name?: string;
            /**
             * @description operator only by an operator key, in its own tenant.
             * @default member
             * @enum {string}
             */
            role: "member" | "admin" | "operator";
            /** @description Refused this many seconds from now; not with expiresAt. */
            expiresInS?: number;
            /**
             * Format: date-time
             * @description Refused from this time on (in the future); not with expiresInS.
             */
            expiresAt?: string;
            /**
             * @description sandglass: `sg_` and 43 base64url characters. e2b: `e2b_` and 64 hex digits, for E2B SDK releases that refuse any other key before sending it (docs/e2b.md). Both carry 256 random bits and are checked the same way.
             * @default sandglass
             * @enum {string}
             */
            format: "sandglass" | "e2b";
        };
        CreateApiKeyInTenantRequest: {
            /** @description Absent: the caller's own tenant. */
            tenantId?: string;
            name?: string;
            /**
             * @default member
             * @enum {string}
             */
            role: "member" | "admin" | "operator";
            expiresInS?: number;
            /** Format: date-time */
            expiresAt?: string;
            /**
             * @default sandglass
             * @enum {string}
             */
            format: "sandglass" | "e2b";
        };
        Error: {
            error: {
                /**
                 * @description The codes of spec/errors.yaml (a contract test checks they match).
                 * @enum {string}
                 */
                code: "invalid_argument" | "malformed_json" | "payload_too_large" | "unauthenticated" | "permission_denied" | "not_found" | "sandbox_not_found" | "template_not_found" | "tenant_not_found" | "command_not_found" | "file_not_found" | "file_exists" | "not_a_directory" | "is_a_directory" | "path_outside_sandbox" | "sandbox_not_running" | "sandbox_paused" | "command_exited" | "capacity_exhausted" | "rate_limited" | "template_not_ready" | "template_build_in_progress" | "template_build_failed" | "size_unsupported" | "snapshot_interval_unachievable" | "vm_failed" | "agent_timeout" | "timeout" | "gateway_unavailable" | "conflict" | "snapshot_not_found" | "snapshot_corrupt" | "snapshot_out_of_range" | "snapshot_failed" | "sandbox_running" | "key_unavailable" | "key_revoked" | "storage_full" | "storage_unavailable" | "egress_denied" | "egress_secret_scope" | "egress_approval_denied" | "policy_invalid" | "secret_not_found" | "approval_not_found" | "api_key_not_found" | "api_key_revoked" | "api_key_expired" | "node_fenced" | "node_event_refused" | "node_event_invalid" | "vm_reply_refused" | "port_not_listening" | "internal";
                message: string;
                requestId?: string;
                details?: Record<string, unknown>;
            };
        };
    };
    responses: {
        /** @description An error in the standard wire format. */
        Error: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Error"];
            };
        };
    };
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    getHealth: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The server is up. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Health"];
                };
            };
        };
    };
    listTemplates: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description All templates. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        templates: components["schemas"]["Template"][];
                    };
                };
            };
            401: components["responses"]["Error"];
        };
    };
    createTemplateVersion: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CreateTemplateVersionRequest"];
            };
        };
        responses: {
            /** @description The new version. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateVersion"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
        };
    };
    getTemplate: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                name: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The template. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateDetail"];
                };
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    deleteTemplate: {
        parameters: {
            query?: {
                version?: number;
            };
            header?: never;
            path: {
                name: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Deleted. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
        };
    };
    updateTemplate: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                name: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    warmPoolSize?: number;
                    /** @description Published for every tenant (operator keys only). */
                    public?: boolean;
                };
            };
        };
        responses: {
            /** @description The template with its pool size. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Template"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    getTemplateCacheEntry: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                key: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The cached step. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateCacheEntry"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    putTemplateCacheEntry: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                key: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    snapshotId: string;
                };
            };
        };
        responses: {
            /** @description Recorded. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateCacheEntry"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    listTemplateBuilds: {
        parameters: {
            query?: {
                name?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The builds. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        builds: components["schemas"]["TemplateBuild"][];
                    };
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
        };
    };
    startTemplateBuild: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    name: components["schemas"]["TemplateName"];
                };
            };
        };
        responses: {
            /** @description The build, running. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateBuild"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            409: components["responses"]["Error"];
        };
    };
    getTemplateBuild: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The build. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateBuild"];
                };
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    readTemplateBuildLog: {
        parameters: {
            query?: {
                fromLine?: number;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Log lines. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        lines: components["schemas"]["TemplateBuildLine"][];
                        nextLine: number;
                        status: components["schemas"]["TemplateBuildStatus"];
                    };
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    reportTemplateBuild: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["TemplateBuildReport"];
            };
        };
        responses: {
            /** @description Recorded. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
        };
    };
    failTemplateBuild: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["TemplateBuildError"];
            };
        };
        responses: {
            /** @description The build, failed. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateBuild"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
        };
    };
    listSandboxes: {
        parameters: {
            query?: {
                state?: components["schemas"]["SandboxState"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The sandboxes. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        sandboxes: components["schemas"]["Sandbox"][];
                    };
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
        };
    };
    createSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["CreateSandboxRequest"];
            };
        };
        responses: {
            /** @description The sandbox runs. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
            413: components["responses"]["Error"];
            500: components["responses"]["Error"];
            502: components["responses"]["Error"];
            503: components["responses"]["Error"];
            504: components["responses"]["Error"];
        };
    };
    getSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The sandbox. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    killSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The sandbox has ended. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            502: components["responses"]["Error"];
        };
    };
    setSandboxTimeout: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SetTimeoutRequest"];
            };
        };
        responses: {
            /** @description The sandbox with its new expiry. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
            502: components["responses"]["Error"];
        };
    };
    createSandboxAccess: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Where and how to reach the sandbox's data plane. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Access"];
                };
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
        };
    };
    listSandboxEvents: {
        parameters: {
            query?: {
                /** @description Only events after this seq, to page or resume. */
                afterSeq?: number;
                limit?: number;
                /** @description Only these types, comma-separated; a name without a dot is a family (`egress,secret` is every egress.* and secret.* event: what the egress gateway recorded, approvals included). */
                type?: string;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The events. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        events: components["schemas"]["Event"][];
                    };
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    exportSandboxAudit: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The export. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/x-ndjson": string;
                };
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            503: components["responses"]["Error"];
        };
    };
    getAuditPublicKey: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The key. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["AuditPublicKey"];
                };
            };
            503: components["responses"]["Error"];
        };
    };
    setSandboxNetwork: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["NetworkPolicyRequest"];
            };
        };
        responses: {
            /** @description The policy now in force. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        network: components["schemas"]["NetworkPolicy"];
                    };
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
            502: components["responses"]["Error"];
        };
    };
    listApprovals: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The pending requests. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        approvals: components["schemas"]["ApprovalRequest"][];
                    };
                };
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            502: components["responses"]["Error"];
        };
    };
    decideApproval: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                requestId: components["schemas"]["ApprovalRequestId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ApprovalDecisionRequest"];
            };
        };
        responses: {
            /** @description Decided; the held request goes on (approve) or is refused with egress_approval_denied (deny). */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            502: components["responses"]["Error"];
        };
    };
    listSecrets: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The secrets. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        secrets: components["schemas"]["SecretInfo"][];
                    };
                };
            };
            401: components["responses"]["Error"];
        };
    };
    putSecret: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                name: components["schemas"]["SecretName"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["PutSecretRequest"];
            };
        };
        responses: {
            /** @description Replaced. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SecretInfo"];
                };
            };
            /** @description Created. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SecretInfo"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            413: components["responses"]["Error"];
            503: components["responses"]["Error"];
        };
    };
    deleteSecret: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                name: components["schemas"]["SecretName"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Removed. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    setSnapshotInterval: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SetSnapshotIntervalRequest"];
            };
        };
        responses: {
            /** @description The sandbox with its new interval. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
            502: components["responses"]["Error"];
        };
    };
    listSnapshots: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The snapshots, ascending by takenAt, and the interval asked for against the one achieved. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        snapshots: components["schemas"]["Snapshot"][];
                        cadence: components["schemas"]["SnapshotCadence"];
                    };
                };
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    takeSnapshot: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["TakeSnapshotRequest"];
            };
        };
        responses: {
            /** @description The snapshot, committed to the store. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Snapshot"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
            500: components["responses"]["Error"];
            502: components["responses"]["Error"];
            503: components["responses"]["Error"];
            504: components["responses"]["Error"];
            507: components["responses"]["Error"];
        };
    };
    pauseSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["PauseSandboxRequest"];
            };
        };
        responses: {
            /** @description The paused sandbox and the snapshot it resumes from. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["PauseResponse"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
            500: components["responses"]["Error"];
            502: components["responses"]["Error"];
            503: components["responses"]["Error"];
            504: components["responses"]["Error"];
            507: components["responses"]["Error"];
        };
    };
    resumeSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ResumeSandboxRequest"];
            };
        };
        responses: {
            /** @description The sandbox runs again. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Sandbox"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
            500: components["responses"]["Error"];
            502: components["responses"]["Error"];
            503: components["responses"]["Error"];
            504: components["responses"]["Error"];
        };
    };
    getSnapshot: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The snapshot. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Snapshot"];
                };
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    deleteSnapshot: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The snapshot is gone. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
            502: components["responses"]["Error"];
            503: components["responses"]["Error"];
        };
    };
    nameSnapshot: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["NameSnapshotRequest"];
            };
        };
        responses: {
            /** @description The snapshot with its new name. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Snapshot"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
        };
    };
    forkSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ForkRequest"];
            };
        };
        responses: {
            /** @description The forks that run. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ForkResponse"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
            413: components["responses"]["Error"];
            500: components["responses"]["Error"];
            502: components["responses"]["Error"];
            503: components["responses"]["Error"];
            504: components["responses"]["Error"];
        };
    };
    listNodes: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The nodes, by id. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        nodes: components["schemas"]["NodeInfo"][];
                    };
                };
            };
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
        };
    };
    createNodeEnrolment: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    nodeId: string;
                    /**
                     * @description How long the token may be spent.
                     * @default 3600
                     */
                    ttlS?: number;
                };
            };
        };
        responses: {
            /** @description The token. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        nodeId: string;
                        token: string;
                        /** Format: date-time */
                        expiresAt: string;
                    };
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
        };
    };
    revokeNode: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The node as it is now. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["NodeInfo"];
                };
            };
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    createTenant: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CreateTenantRequest"];
            };
        };
        responses: {
            /** @description The new tenant. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Tenant"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            409: components["responses"]["Error"];
        };
    };
    createApiKey: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["CreateApiKeyRequest"];
            };
        };
        responses: {
            /** @description The new key. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApiKey"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    listApiKeys: {
        parameters: {
            query?: {
                tenantId?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The tenant's keys. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        apiKeys: components["schemas"]["ApiKeyInfo"][];
                    };
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    createApiKeyInTenant: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["CreateApiKeyInTenantRequest"];
            };
        };
        responses: {
            /** @description The new key. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApiKey"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    getTenantKeys: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The tenant's keys. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TenantKeyStatus"];
                };
            };
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    setTenantKeyProvider: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SetKeyProviderRequest"];
            };
        };
        responses: {
            /** @description The tenant's keys under the provider. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TenantKeyStatus"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
            409: components["responses"]["Error"];
            503: components["responses"]["Error"];
        };
    };
    rotateTenantKey: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": {
                    /** @description Label of a new wrapping key on the same token. */
                    key?: string;
                };
            };
        };
        responses: {
            /** @description The tenant's keys after the rotation. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TenantKeyStatus"];
                };
            };
            400: components["responses"]["Error"];
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
            503: components["responses"]["Error"];
        };
    };
    revokeTenantKey: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The revocation and what the gateways stopped. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        keys: components["schemas"]["TenantKeyStatus"];
                        stoppedSandboxes: string[];
                    };
                };
            };
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
    revokeApiKey: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The key, now revoked. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApiKeyInfo"];
                };
            };
            401: components["responses"]["Error"];
            403: components["responses"]["Error"];
            404: components["responses"]["Error"];
        };
    };
}

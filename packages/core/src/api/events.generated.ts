// GENERATED from spec/events.yaml by scripts/gen.ts. Do not edit by hand: run `npm run gen`.

/** Each event type: what it is about, whether a node may send it, and the JSON Schema of its data. */
export const EVENT_SPECS = {
  "sandbox.created": { scope: "sandbox", node: false, data: {"type":"object","additionalProperties":false,"required":["template","memoryMib","vcpus","timeoutS","metadata","gatewayId","gatewayUrl"],"properties":{"template":{"type":"string","minLength":1,"maxLength":256},"templateVersionId":{"type":"string","maxLength":64},"memoryMib":{"type":"integer","minimum":1},"vcpus":{"type":"integer","minimum":1},"timeoutS":{"type":"number","minimum":0},"metadata":{"type":"object","additionalProperties":{"type":"string"}},"gatewayId":{"type":["string","null"]},"gatewayUrl":{"type":["string","null"]},"snapshotIntervalS":{"type":"number","minimum":0},"sourceSnapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"network":{"oneOf":[{"type":"object","additionalProperties":false,"properties":{"allow":{"type":"array","maxItems":4096,"items":{"type":"string","maxLength":512}},"deny":{"type":"array","maxItems":4096,"items":{"type":"string","maxLength":512}}}},{"type":"null"}]},"secrets":{"type":"array","maxItems":1024,"items":{"type":"string","pattern":"^[A-Z_][A-Z0-9_]{0,63}$"}},"envNames":{"type":"array","maxItems":4096,"items":{"type":"string","minLength":1,"maxLength":1024}},"diskMib":{"type":"integer","minimum":1},"onTimeout":{"enum":["kill","pause"]},"onTimeoutKeepMemory":{"enum":[false]},"autoResume":{"type":"boolean"}}} },
  "sandbox.started": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["pid","vmId","pooled","template","accel"],"properties":{"pid":{"type":["integer","null"],"minimum":0,"maximum":4294967295},"vmId":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,64}$"},"restoreMs":{"type":"number","minimum":0,"maximum":1000000000000000},"prepareMs":{"type":"number","minimum":-1000000000000000,"maximum":1000000000000000},"pooled":{"type":"boolean"},"template":{"type":"string","minLength":1,"maxLength":256},"accel":{"type":"string","maxLength":32},"placeholdersContentId":{"type":"string","pattern":"^[0-9a-f]{64}$"},"coldBoot":{"enum":[true]}}} },
  "sandbox.resumed": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["snapshotId"],"properties":{"snapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"pid":{"type":["integer","null"],"minimum":0,"maximum":4294967295},"restoreMs":{"type":"number","minimum":0,"maximum":1000000000000000},"prepareMs":{"type":"number","minimum":-1000000000000000,"maximum":1000000000000000},"trigger":{"enum":["request"]},"coldBoot":{"enum":[true]}}} },
  "sandbox.forked": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["snapshotId","sourceSandboxId"],"properties":{"snapshotId":{"oneOf":[{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},{"type":"null"}]},"sourceSandboxId":{"type":"string","pattern":"^sbx_[a-z2-7]{20}$"},"network":{"oneOf":[{"type":"object","additionalProperties":false,"properties":{"allow":{"type":"array","maxItems":4096,"items":{"type":"string","maxLength":512}},"deny":{"type":"array","maxItems":4096,"items":{"type":"string","maxLength":512}}}},{"type":"null"}]},"secrets":{"type":"array","maxItems":1024,"items":{"type":"string","pattern":"^[A-Z_][A-Z0-9_]{0,63}$"}},"replayOf":{"type":"string","pattern":"^sbx_[a-z2-7]{20}$"}}} },
  "sandbox.paused": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["snapshotId"],"properties":{"snapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"reason":{"type":"string","maxLength":512},"memory":{"enum":[false]}}} },
  "sandbox.synced": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["timeUnixNs","entropyContentId"],"properties":{"timeUnixNs":{"type":"string","pattern":"^[0-9]{1,24}$"},"entropyContentId":{"oneOf":[{"type":"string","pattern":"^[0-9a-f]{64}$"},{"type":"null"}]},"replayOf":{"type":"string","pattern":"^sbx_[a-z2-7]{20}$"}}} },
  "sandbox.killed": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"properties":{"reason":{"enum":["killed","timeout","shutdown"]}}} },
  "sandbox.failed": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["reason"],"properties":{"reason":{"type":"string","maxLength":16384},"code":{"type":"string","pattern":"^[a-z][a-z0-9_]{0,63}$"},"consoleTail":{"type":"string","maxLength":65536}}} },
  "sandbox.timeout": { scope: "sandbox", node: false, data: {"type":"object","additionalProperties":false} },
  "sandbox.extended": { scope: "sandbox", node: false, data: {"type":"object","additionalProperties":false,"required":["timeoutS","expiresAt"],"properties":{"timeoutS":{"type":"number","minimum":0},"expiresAt":{"type":"string","format":"date-time"}}} },
  "sandbox.moved": { scope: "sandbox", node: false, data: {"type":"object","additionalProperties":false,"required":["fromGatewayId","gatewayId","gatewayUrl","reason","snapshotId","snapshotTakenAt"],"properties":{"fromGatewayId":{"type":["string","null"]},"gatewayId":{"type":"string"},"gatewayUrl":{"type":"string"},"reason":{"enum":["node_dead","node_restarted","resume"]},"snapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"snapshotTakenAt":{"type":"string"}}} },
  "sandbox.configured": { scope: "sandbox", node: false, data: {"type":"object","additionalProperties":false,"required":["snapshotIntervalS"],"properties":{"snapshotIntervalS":{"type":"number","minimum":0}}} },
  "sandbox.network_changed": { scope: "sandbox", node: false, data: {"type":"object","additionalProperties":false,"properties":{"allow":{"type":"array","maxItems":4096,"items":{"type":"string","maxLength":512}},"deny":{"type":"array","maxItems":4096,"items":{"type":"string","maxLength":512}}}} },
  "snapshot.taken": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["snapshotId","parentId","reason","name","pinned","sizeAddedBytes","memoryMib","vcpus","template"],"properties":{"snapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"takenAt":{"type":"string","format":"date-time"},"parentId":{"oneOf":[{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},{"type":"null"}]},"reason":{"enum":["rolling","manual","pause"]},"name":{"type":["string","null"],"minLength":1,"maxLength":64},"pinned":{"type":"boolean"},"sizeAddedBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"memoryMib":{"type":"integer","minimum":1,"maximum":1048576},"vcpus":{"type":"integer","minimum":1,"maximum":1024},"template":{"type":"string","minLength":1,"maxLength":256},"pausedMs":{"type":"number","minimum":0,"maximum":1000000000000000},"copyMs":{"type":"number","minimum":0,"maximum":1000000000000000},"stateMs":{"type":"number","minimum":0,"maximum":1000000000000000},"newChunks":{"type":"integer","minimum":0,"maximum":9007199254740991},"memory":{"enum":[false]}}} },
  "snapshot.failed": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["reason","code"],"properties":{"reason":{"type":"string","maxLength":16384},"code":{"type":"string","pattern":"^[a-z][a-z0-9_]{0,63}$"},"snapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"attempt":{"type":"integer","minimum":0,"maximum":1000000},"willRetry":{"type":"boolean"}}} },
  "snapshot.deleted": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["snapshotId","why"],"properties":{"snapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"why":{"enum":["retention","user"]}}} },
  "snapshot.behind": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["intervalS","achievedIntervalS","windowS","takenInWindow","lateS","why"],"properties":{"intervalS":{"type":"number","exclusiveMinimum":0,"maximum":864000000},"achievedIntervalS":{"type":["number","null"],"minimum":0,"maximum":864000000},"windowS":{"type":"number","minimum":0,"maximum":864000000},"takenInWindow":{"type":"integer","minimum":0,"maximum":9007199254740991},"lateS":{"type":"number","minimum":0,"maximum":864000000},"why":{"enum":["slots_full","capture_slow","failing"]}}} },
  "snapshot.caught_up": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["intervalS","achievedIntervalS","windowS","takenInWindow","behindForS"],"properties":{"intervalS":{"type":"number","exclusiveMinimum":0,"maximum":864000000},"achievedIntervalS":{"type":["number","null"],"minimum":0,"maximum":864000000},"windowS":{"type":"number","minimum":0,"maximum":864000000},"takenInWindow":{"type":"integer","minimum":0,"maximum":9007199254740991},"behindForS":{"type":"number","minimum":0,"maximum":864000000}}} },
  "snapshot.named": { scope: "sandbox", node: false, data: {"type":"object","additionalProperties":false,"required":["snapshotId","name","previousName"],"properties":{"snapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"name":{"type":["string","null"],"minLength":1,"maxLength":64},"previousName":{"type":["string","null"],"minLength":1,"maxLength":64}}} },
  "command.started": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["commandId","argv","cwd","pty","user","envNames","stdin","timeoutMs","recordingId"],"properties":{"commandId":{"type":"string","pattern":"^cmd_[a-z2-7]{20}$"},"argv":{"type":"array","minItems":1,"maxItems":65536,"items":{"type":"string","maxLength":1048576}},"cwd":{"type":["string","null"],"maxLength":4096},"pty":{"type":"boolean"},"user":{"type":"string","minLength":1,"maxLength":256},"envNames":{"type":"array","maxItems":4096,"items":{"type":"string","minLength":1,"maxLength":1024}},"stdin":{"type":"boolean"},"timeoutMs":{"type":["number","null"],"minimum":0},"recordingId":{"oneOf":[{"type":"string","pattern":"^[0-9a-f]{64}$"},{"type":"null"}]}}} },
  "command.input": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["commandId","kind","outputOffset"],"properties":{"commandId":{"type":"string","pattern":"^cmd_[a-z2-7]{20}$"},"kind":{"enum":["stdin","signal","resize"]},"outputOffset":{"oneOf":[{"type":"integer","minimum":0,"maximum":9007199254740991},{"type":"null"}]},"contentId":{"oneOf":[{"type":"string","pattern":"^[0-9a-f]{64}$"},{"type":"null"}]},"sizeBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"eof":{"type":"boolean"},"signal":{"type":"string","pattern":"^SIG[A-Z0-9+-]{1,12}$"},"cols":{"type":"integer","minimum":0,"maximum":65535},"rows":{"type":"integer","minimum":0,"maximum":65535}}} },
  "command.exited": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["commandId","exitCode","signal","timedOut","outputBytes"],"properties":{"commandId":{"type":"string","pattern":"^cmd_[a-z2-7]{20}$"},"exitCode":{"type":["integer","null"],"minimum":-2147483648,"maximum":2147483647},"signal":{"type":["string","null"],"pattern":"^SIG[A-Z0-9+-]{1,12}$"},"timedOut":{"type":"boolean"},"outputBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"output":{"type":"object","additionalProperties":false,"required":["sha256","stdoutSha256","stderrSha256","stdoutBytes","stderrBytes"],"properties":{"sha256":{"type":"string","pattern":"^[0-9a-f]{64}$"},"stdoutSha256":{"type":"string","pattern":"^[0-9a-f]{64}$"},"stderrSha256":{"type":"string","pattern":"^[0-9a-f]{64}$"},"stdoutBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"stderrBytes":{"type":"integer","minimum":0,"maximum":9007199254740991}}}}} },
  "file.written": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["path","sizeBytes"],"properties":{"path":{"type":"string","minLength":1,"maxLength":4096},"sizeBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"contentId":{"oneOf":[{"type":"string","pattern":"^[0-9a-f]{64}$"},{"type":"null"}]},"xattrs":{"type":"object","maxProperties":256,"additionalProperties":{"type":"string","maxLength":65536}}}} },
  "file.tar_written": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["path","entries","sizeBytes","archiveBytes"],"properties":{"path":{"type":"string","minLength":1,"maxLength":4096},"entries":{"type":"integer","minimum":0,"maximum":9007199254740991},"sizeBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"archiveBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"contentId":{"oneOf":[{"type":"string","pattern":"^[0-9a-f]{64}$"},{"type":"null"}]}}} },
  "file.removed": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["path"],"properties":{"path":{"type":"string","minLength":1,"maxLength":4096}}} },
  "file.dir_created": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["path"],"properties":{"path":{"type":"string","minLength":1,"maxLength":4096}}} },
  "file.renamed": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["from","to"],"properties":{"from":{"type":"string","minLength":1,"maxLength":4096},"to":{"type":"string","minLength":1,"maxLength":4096}}} },
  "egress.request": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["host","port","scheme","method","path","allowed","reason","secrets","bytesUp","bytesDown","durationMs"],"properties":{"host":{"type":"string","maxLength":253},"port":{"type":"integer","minimum":0,"maximum":65535},"scheme":{"enum":["http","https","tunnel"]},"method":{"type":"string","maxLength":32},"path":{"type":"string","maxLength":65536},"allowed":{"type":"boolean"},"reason":{"type":"string","maxLength":16384},"rule":{"type":"string","maxLength":1024},"secrets":{"type":"array","maxItems":1024,"items":{"type":"string","pattern":"^[A-Z_][A-Z0-9_]{0,63}$"}},"bytesUp":{"type":"integer","minimum":0,"maximum":9007199254740991},"bytesDown":{"type":"integer","minimum":0,"maximum":9007199254740991},"status":{"type":"integer","minimum":100,"maximum":999},"code":{"type":"string","pattern":"^[a-z][a-z0-9_]{0,63}$"},"error":{"type":"string","maxLength":16384},"durationMs":{"type":"number","minimum":0,"maximum":1000000000000000}}} },
  "egress.secret_scope": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["secret","host","port","method","path","where","reason"],"properties":{"secret":{"type":"string","pattern":"^[A-Z_][A-Z0-9_]{0,63}$"},"host":{"type":"string","maxLength":253},"port":{"type":"integer","minimum":0,"maximum":65535},"method":{"type":"string","maxLength":32},"path":{"type":"string","maxLength":65536},"where":{"enum":["header","url","body"]},"reason":{"type":"string","maxLength":16384}}} },
  "egress.exchange": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["scheme","host","port","method","url","requestHeaders","requestBody","status","responseHeaders","responseBody","startedAtMs","durationMs"],"properties":{"scheme":{"enum":["http","https"]},"host":{"type":"string","maxLength":253},"port":{"type":"integer","minimum":0,"maximum":65535},"method":{"type":"string","maxLength":32},"url":{"type":"string","maxLength":65536},"requestHeaders":{"type":"array","maxItems":1024,"items":{"type":"array","minItems":2,"maxItems":2,"items":{"type":"string","maxLength":65536}}},"requestBody":{"type":"object","additionalProperties":false,"required":["sizeBytes","truncated"],"properties":{"encoding":{"enum":["utf8","base64"]},"data":{"type":"string","maxLength":4194304},"contentId":{"type":"string","pattern":"^[0-9a-f]{64}$"},"recordedBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"sizeBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"truncated":{"type":"boolean"}}},"status":{"type":"integer","minimum":100,"maximum":999},"responseHeaders":{"type":"array","maxItems":1024,"items":{"type":"array","minItems":2,"maxItems":2,"items":{"type":"string","maxLength":65536}}},"responseBody":{"type":"object","additionalProperties":false,"required":["sizeBytes","truncated"],"properties":{"encoding":{"enum":["utf8","base64"]},"data":{"type":"string","maxLength":4194304},"contentId":{"type":"string","pattern":"^[0-9a-f]{64}$"},"recordedBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"sizeBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"truncated":{"type":"boolean"}}},"startedAtMs":{"type":"number","minimum":0,"maximum":1000000000000000},"durationMs":{"type":"number","minimum":0,"maximum":1000000000000000}}} },
  "egress.replay_unrecorded": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["method","url","requestBytes"],"properties":{"method":{"type":"string","maxLength":32},"url":{"type":"string","maxLength":65536},"requestBytes":{"type":"integer","minimum":0,"maximum":9007199254740991}}} },
  "egress.rejected": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["reason"],"properties":{"reason":{"type":"string","maxLength":16384},"status":{"type":"integer","minimum":100,"maximum":999},"code":{"type":"string","pattern":"^[a-z][a-z0-9_]{0,63}$"},"host":{"type":"string","maxLength":253},"port":{"type":"integer","minimum":0,"maximum":65535}}} },
  "secret.approval_requested": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["requestId","secret","host","port","method","path","expiresAtMs"],"properties":{"requestId":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,64}$"},"secret":{"type":"string","pattern":"^[A-Z_][A-Z0-9_]{0,63}$"},"host":{"type":"string","maxLength":253},"port":{"type":"integer","minimum":0,"maximum":65535},"method":{"type":"string","maxLength":32},"path":{"type":"string","maxLength":65536},"expiresAtMs":{"type":"number","minimum":0,"maximum":1000000000000000}}} },
  "secret.approval_decided": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["secret","decision"],"properties":{"requestId":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,64}$"},"secret":{"type":"string","pattern":"^[A-Z_][A-Z0-9_]{0,63}$"},"decision":{"enum":["approved","denied","timeout","cancelled"]},"grantUntilMs":{"type":"number","minimum":0,"maximum":1000000000000000}}} },
  "port.visibility": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["port","public"],"properties":{"port":{"type":"integer","minimum":0,"maximum":65535},"public":{"type":"boolean"}}} },
  "port.request": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["port","via","status","bytesIn","bytesOut"],"properties":{"port":{"type":"integer","minimum":0,"maximum":65535},"via":{"enum":["host","path","tunnel"]},"method":{"type":"string","maxLength":32},"status":{"type":"integer","minimum":0,"maximum":999},"bytesIn":{"type":"integer","minimum":0,"maximum":9007199254740991},"bytesOut":{"type":"integer","minimum":0,"maximum":9007199254740991}}} },
  "recording.capped": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["capBytes","recordedBytes"],"properties":{"capBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"recordedBytes":{"type":"integer","minimum":0,"maximum":9007199254740991}}} },
  "agent.protocol_violation": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["kind","stream","creditBytes","frameBytes"],"properties":{"kind":{"enum":["credit_exceeded"]},"stream":{"type":"integer","minimum":0,"maximum":9007199254740991},"creditBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"frameBytes":{"type":"integer","minimum":0,"maximum":9007199254740991}}} },
  "quota.events_dropped": { scope: "sandbox", node: true, data: {"type":"object","additionalProperties":false,"required":["maxPerWindow","windowS","firstDroppedType"],"properties":{"maxPerWindow":{"type":"integer","minimum":0,"maximum":9007199254740991},"windowS":{"type":"number","minimum":0,"maximum":864000000},"firstDroppedType":{"type":"string","pattern":"^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$","maxLength":64}}} },
  "gc.completed": { scope: "system", node: true, data: {"type":"object","additionalProperties":false,"required":["thinned","manifests","liveChunks","deletedChunks","abandonedWrites","freedBytes","keptYoung","undecidedTenants","durationMs"],"properties":{"thinned":{"type":"integer","minimum":0,"maximum":9007199254740991},"manifests":{"type":"integer","minimum":0,"maximum":9007199254740991},"liveChunks":{"type":"integer","minimum":0,"maximum":9007199254740991},"deletedChunks":{"type":"integer","minimum":0,"maximum":9007199254740991},"abandonedWrites":{"type":"integer","minimum":0,"maximum":9007199254740991},"freedBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"keptYoung":{"type":"integer","minimum":0,"maximum":9007199254740991},"undecidedTenants":{"type":"array","maxItems":100000,"items":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,64}$"}},"durationMs":{"type":"number","minimum":0,"maximum":1000000000000000}}} },
  "tenant.plaintext_wiped": { scope: "tenant", node: true, data: {"type":"object","additionalProperties":false,"required":["trigger","stoppedSandboxes","wipedFiles"],"properties":{"trigger":{"enum":["api","provider"]},"stoppedSandboxes":{"type":"array","maxItems":4096,"items":{"type":"string","pattern":"^sbx_[a-z2-7]{20}$"}},"wipedFiles":{"type":"integer","minimum":0,"maximum":9007199254740991}}} },
  "tenant.created": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["name"],"properties":{"name":{"type":"string","minLength":1,"maxLength":256},"createdByKeyId":{"type":"string","minLength":1,"maxLength":64}}} },
  "tenant.data_purged": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["manifests","chunks","freedBytes","revokedAt"],"properties":{"manifests":{"type":"integer","minimum":0,"maximum":9007199254740991},"chunks":{"type":"integer","minimum":0,"maximum":9007199254740991},"freedBytes":{"type":"integer","minimum":0,"maximum":9007199254740991},"revokedAt":{"type":"string","format":"date-time"}}} },
  "api_key.created": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["keyId","role","prefix"],"properties":{"keyId":{"type":"string","pattern":"^key_[a-z2-7]{20}$"},"role":{"type":"string","maxLength":32},"prefix":{"type":"string","maxLength":64},"name":{"type":"string","maxLength":256},"createdByKeyId":{"type":"string","minLength":1,"maxLength":64},"expiresAt":{"type":"string","format":"date-time"}}} },
  "api_key.revoked": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["keyId","role","prefix","revokedByKeyId"],"properties":{"keyId":{"type":"string","pattern":"^key_[a-z2-7]{20}$"},"role":{"type":"string","maxLength":32},"prefix":{"type":"string","maxLength":64},"revokedByKeyId":{"type":"string","minLength":1,"maxLength":64}}} },
  "api_key.role_changed": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["keyId","from","to"],"properties":{"keyId":{"type":"string","pattern":"^key_[a-z2-7]{20}$"},"from":{"type":"string","maxLength":32},"to":{"type":"string","maxLength":32}}} },
  "secret.set": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["name","hosts","header","approval"],"properties":{"name":{"type":"string","pattern":"^[A-Z_][A-Z0-9_]{0,63}$"},"hosts":{"type":"array","maxItems":1024,"items":{"type":"string","maxLength":512}},"header":{"type":["string","null"],"maxLength":256},"approval":{"enum":["none","required"]},"allowPlaintext":{"type":"boolean"},"allowUpgrade":{"type":"boolean"}}} },
  "secret.removed": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["name"],"properties":{"name":{"type":"string","pattern":"^[A-Z_][A-Z0-9_]{0,63}$"}}} },
  "key.provider_set": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["provider","currentVersion","byKeyId"],"properties":{"provider":{"enum":["keyring","pkcs11"]},"token":{"type":"string","maxLength":256},"key":{"type":"string","maxLength":256},"currentVersion":{"type":"integer","minimum":1},"byKeyId":{"type":"string","minLength":1,"maxLength":64}}} },
  "key.rotated": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["provider","fromVersion","toVersion","byKeyId"],"properties":{"provider":{"type":"string","maxLength":32},"fromVersion":{"type":"integer","minimum":1},"toVersion":{"type":"integer","minimum":1},"key":{"type":"string","maxLength":256},"rewrappedVersions":{"type":"array","items":{"type":"integer","minimum":1}},"byKeyId":{"type":"string","minLength":1,"maxLength":64}}} },
  "key.revoked": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["provider","versions","byKeyId"],"properties":{"provider":{"type":"string","maxLength":32},"versions":{"type":"array","items":{"type":"integer","minimum":1}},"byKeyId":{"type":"string","minLength":1,"maxLength":64}}} },
  "template.published": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["name","version","versionId","snapshotId","buildId"],"properties":{"name":{"type":"string","minLength":1,"maxLength":64},"version":{"type":"integer","minimum":1},"versionId":{"type":"string","maxLength":64},"snapshotId":{"type":"string","pattern":"^snap_[a-z2-7]{20}$"},"buildId":{"type":["string","null"],"maxLength":64}}} },
  "template.visibility_changed": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["name","public","keyId"],"properties":{"name":{"type":"string","minLength":1,"maxLength":64},"public":{"type":"boolean"},"keyId":{"type":"string","pattern":"^key_[a-z2-7]{20}$"}}} },
  "template.deleted": { scope: "tenant", node: false, data: {"type":"object","additionalProperties":false,"required":["name","versions"],"properties":{"name":{"type":"string","minLength":1,"maxLength":64},"versions":{"type":"array","items":{"type":"integer","minimum":1}}}} },
} as const;

interface components {
    schemas: {
        /** @description The control plane created the sandbox and placed it on gatewayId (a fork names sourceSnapshotId). */
        "sandbox.created": {
            template: string;
            templateVersionId?: string;
            memoryMib: number;
            vcpus: number;
            timeoutS: number;
            metadata: {
                [key: string]: string;
            };
            gatewayId: string | null;
            gatewayUrl: string | null;
            snapshotIntervalS?: number;
            sourceSnapshotId?: string;
            network?: {
                allow?: string[];
                deny?: string[];
            } | null;
            secrets?: string[];
            envNames?: string[];
            diskMib?: number;
            /** @enum {unknown} */
            onTimeout?: "kill" | "pause";
            /** @enum {unknown} */
            onTimeoutKeepMemory?: false;
            autoResume?: boolean;
        };
        /** @description The node booted the sandbox's VM (a restore of its template, or of a fork's snapshot). */
        "sandbox.started": {
            pid: number | null;
            vmId: string;
            restoreMs?: number;
            prepareMs?: number;
            pooled: boolean;
            template: string;
            accel: string;
            placeholdersContentId?: string;
            /** @enum {unknown} */
            coldBoot?: true;
        };
        /** @description Running again from snapshotId in a new VM; trigger request when a request woke it (autoResume). */
        "sandbox.resumed": {
            snapshotId: string;
            pid?: number | null;
            restoreMs?: number;
            prepareMs?: number;
            /** @enum {unknown} */
            trigger?: "request";
            /** @enum {unknown} */
            coldBoot?: true;
        };
        /** @description A fork started from snapshotId of sourceSandboxId (null: a replay from creation), recorded after its sandbox.created; network and secrets are what the fork really got. */
        "sandbox.forked": {
            snapshotId: string | null;
            sourceSandboxId: string;
            network?: {
                allow?: string[];
                deny?: string[];
            } | null;
            secrets?: string[];
            replayOf?: string;
        };
        /** @description The VM was snapshotted (snapshotId, one of this sandbox's) and released. reason timeout: its timeout paused it; other text: why the platform paused it (an embedded server's restart). */
        "sandbox.paused": {
            snapshotId: string;
            reason?: string;
            /** @enum {unknown} */
            memory?: false;
        };
        /** @description The node set the guest's clock and credited it entropy; the entropy is only in the recording. */
        "sandbox.synced": {
            timeUnixNs: string;
            entropyContentId: string | null;
            replayOf?: string;
        };
        /** @description Ended. reason killed (the API; absent in old logs means killed), timeout or shutdown (the node's own). */
        "sandbox.killed": {
            /** @enum {unknown} */
            reason?: "killed" | "timeout" | "shutdown";
        };
        /** @description Failed for good; code is the error code when one applies, consoleTail the VM console's last bytes. */
        "sandbox.failed": {
            reason: string;
            code?: string;
            consoleTail?: string;
        };
        /** @description Ended by its timeout (logs from before sandbox.killed carried the reason); nothing writes it now. */
        "sandbox.timeout": Record<string, unknown>;
        /** @description The expiry moved to expiresAt, timeoutS from when it was asked. */
        "sandbox.extended": {
            timeoutS: number;
            /** Format: date-time */
            expiresAt: string;
        };
        /** @description Placed on another node from snapshotId (its node died or restarted, or a paused sandbox resumes elsewhere). */
        "sandbox.moved": {
            fromGatewayId: string | null;
            gatewayId: string;
            gatewayUrl: string;
            /** @enum {unknown} */
            reason: "node_dead" | "node_restarted" | "resume";
            snapshotId: string;
            snapshotTakenAt: string;
        };
        /** @description The rolling snapshot interval changed. */
        "sandbox.configured": {
            snapshotIntervalS: number;
        };
        /** @description The egress policy was replaced by this one (the gateway applied it first). */
        "sandbox.network_changed": {
            allow?: string[];
            deny?: string[];
        };
        /** @description A snapshot of the sandbox was committed; takenAt is when the guest was stopped for it. */
        "snapshot.taken": {
            snapshotId: string;
            /** Format: date-time */
            takenAt?: string;
            parentId: string | null;
            /** @enum {unknown} */
            reason: "rolling" | "manual" | "pause";
            name: string | null;
            pinned: boolean;
            sizeAddedBytes: number;
            memoryMib: number;
            vcpus: number;
            template: string;
            pausedMs?: number;
            copyMs?: number;
            stateMs?: number;
            newChunks?: number;
            /** @enum {unknown} */
            memory?: false;
        };
        /** @description A capture failed; the last good snapshot is intact. */
        "snapshot.failed": {
            reason: string;
            code: string;
            snapshotId?: string;
            attempt?: number;
            willRetry?: boolean;
        };
        /** @description The snapshot is gone (retention thinned it, or the user deleted it). */
        "snapshot.deleted": {
            snapshotId: string;
            /** @enum {unknown} */
            why: "retention" | "user";
        };
        /** @description Rolling snapshots fell behind the interval asked for; recorded once, until snapshot.caught_up. */
        "snapshot.behind": {
            intervalS: number;
            achievedIntervalS: number | null;
            windowS: number;
            takenInWindow: number;
            lateS: number;
            /** @enum {unknown} */
            why: "slots_full" | "capture_slow" | "failing";
        };
        /** @description Rolling snapshots of a sandbox that was behind started on time again. */
        "snapshot.caught_up": {
            intervalS: number;
            achievedIntervalS: number | null;
            windowS: number;
            takenInWindow: number;
            behindForS: number;
        };
        /** @description Named, renamed or (name null) unnamed; a named snapshot is pinned. */
        "snapshot.named": {
            snapshotId: string;
            name: string | null;
            previousName: string | null;
        };
        /** @description A command started; variables by name only, their values in the recording (recordingId). */
        "command.started": {
            commandId: string;
            argv: string[];
            cwd: string | null;
            pty: boolean;
            user: string;
            envNames: string[];
            stdin: boolean;
            timeoutMs: number | null;
            recordingId: string | null;
        };
        /** @description A running command got stdin (bytes in the recording: contentId), a signal or a resize, when its output stood at outputOffset. */
        "command.input": {
            commandId: string;
            /** @enum {unknown} */
            kind: "stdin" | "signal" | "resize";
            outputOffset: number | null;
            contentId?: string | null;
            sizeBytes?: number;
            eof?: boolean;
            signal?: string;
            cols?: number;
            rows?: number;
        };
        /** @description A command ended; output holds digests of what it wrote (the agent's count), never the output. */
        "command.exited": {
            commandId: string;
            exitCode: number | null;
            signal: string | null;
            timedOut: boolean;
            outputBytes: number;
            output?: {
                sha256: string;
                stdoutSha256: string;
                stderrSha256: string;
                stdoutBytes: number;
                stderrBytes: number;
            };
        };
        /** @description A file was written through the API; its bytes are in the recording (contentId). */
        "file.written": {
            path: string;
            sizeBytes: number;
            contentId?: string | null;
            xattrs?: {
                [key: string]: string;
            };
        };
        /** @description A tar archive was extracted into the directory path; the archive is in the recording (contentId). */
        "file.tar_written": {
            path: string;
            entries: number;
            sizeBytes: number;
            archiveBytes: number;
            contentId?: string | null;
        };
        /** @description A file or directory was removed through the API. */
        "file.removed": {
            path: string;
        };
        /** @description A directory that did not exist was created through the API. */
        "file.dir_created": {
            path: string;
        };
        /** @description A file was renamed through the API. */
        "file.renamed": {
            from: string;
            to: string;
        };
        /** @description One decision of the egress proxy (allowed or refused), with the secrets it used by name. */
        "egress.request": {
            host: string;
            port: number;
            /** @enum {unknown} */
            scheme: "http" | "https" | "tunnel";
            method: string;
            path: string;
            allowed: boolean;
            reason: string;
            rule?: string;
            secrets: string[];
            bytesUp: number;
            bytesDown: number;
            status?: number;
            code?: string;
            error?: string;
            durationMs: number;
        };
        /** @description A secret's placeholder was about to go where the secret may not (another host, clear text, body). */
        "egress.secret_scope": {
            secret: string;
            host: string;
            port: number;
            method: string;
            path: string;
            /** @enum {unknown} */
            where: "header" | "url" | "body";
            reason: string;
        };
        /** @description One allowed exchange as the upstream saw it, secrets redacted; bodies inline or in the recording. */
        "egress.exchange": {
            /** @enum {unknown} */
            scheme: "http" | "https";
            host: string;
            port: number;
            method: string;
            url: string;
            requestHeaders: string[][];
            requestBody: {
                /** @enum {unknown} */
                encoding?: "utf8" | "base64";
                data?: string;
                contentId?: string;
                recordedBytes?: number;
                sizeBytes: number;
                truncated: boolean;
            };
            status: number;
            responseHeaders: string[][];
            responseBody: {
                /** @enum {unknown} */
                encoding?: "utf8" | "base64";
                data?: string;
                contentId?: string;
                recordedBytes?: number;
                sizeBytes: number;
                truncated: boolean;
            };
            startedAtMs: number;
            durationMs: number;
        };
        /** @description A replay's guest asked for an exchange its recording does not have; refused, and a divergence. */
        "egress.replay_unrecorded": {
            method: string;
            url: string;
            requestBytes: number;
        };
        /** @description The proxy refused a connection before any request in it (limits, a bad CONNECT, a failed handshake). */
        "egress.rejected": {
            reason: string;
            status?: number;
            code?: string;
            host?: string;
            port?: number;
        };
        /** @description A request needs a person's approval to use a secret; it waits until expiresAtMs. */
        "secret.approval_requested": {
            requestId: string;
            secret: string;
            host: string;
            port: number;
            method: string;
            path: string;
            expiresAtMs: number;
        };
        /** @description What became of an approval (no requestId when a running time-boxed grant approved without asking). */
        "secret.approval_decided": {
            requestId?: string;
            secret: string;
            /** @enum {unknown} */
            decision: "approved" | "denied" | "timeout" | "cancelled";
            grantUntilMs?: number;
        };
        /** @description A guest port was made public (reachable without the sandbox's token) or private again. */
        "port.visibility": {
            port: number;
            public: boolean;
        };
        /** @description One request or tunnel to a guest port, with its byte counts. */
        "port.request": {
            port: number;
            /** @enum {unknown} */
            via: "host" | "path" | "tunnel";
            method?: string;
            status: number;
            bytesIn: number;
            bytesOut: number;
        };
        /** @description The sandbox's recording reached its cap; inputs after this carry no content and cannot be replayed. */
        "recording.capped": {
            capBytes: number;
            recordedBytes: number;
        };
        /** @description The guest agent sent past a stream's credit; the stream was reset. Recorded once per sandbox. */
        "agent.protocol_violation": {
            /** @enum {unknown} */
            kind: "credit_exceeded";
            stream: number;
            creditBytes: number;
            frameBytes: number;
        };
        /** @description The sandbox reached its event quota; its further events in this window are dropped. */
        "quota.events_dropped": {
            maxPerWindow: number;
            windowS: number;
            firstDroppedType: string;
        };
        /** @description A retention and chunk-store GC round finished (a standalone gateway's or the control plane's). */
        "gc.completed": {
            thinned: number;
            manifests: number;
            liveChunks: number;
            deletedChunks: number;
            abandonedWrites: number;
            freedBytes: number;
            keptYoung: number;
            undecidedTenants: string[];
            durationMs: number;
        };
        /** @description A node stopped a revoked tenant's sandboxes and wiped its plaintext (told by the control plane, or its provider refused). */
        "tenant.plaintext_wiped": {
            /** @enum {unknown} */
            trigger: "api" | "provider";
            stoppedSandboxes: string[];
            wipedFiles: number;
        };
        /** @description The tenant was created; createdByKeyId is the actor (absent for the local operator). */
        "tenant.created": {
            name: string;
            createdByKeyId?: string;
        };
        /** @description A revoked tenant's chunks and manifests were deleted after the retention period. */
        "tenant.data_purged": {
            manifests: number;
            chunks: number;
            freedBytes: number;
            /** Format: date-time */
            revokedAt: string;
        };
        /** @description An API key was created (its id, role and prefix; never the key or its hash). */
        "api_key.created": {
            keyId: string;
            role: string;
            prefix: string;
            name?: string;
            createdByKeyId?: string;
            /** Format: date-time */
            expiresAt?: string;
        };
        /** @description An API key is refused from now on; revokedByKeyId is the actor. */
        "api_key.revoked": {
            keyId: string;
            role: string;
            prefix: string;
            revokedByKeyId: string;
        };
        /** @description The local key file's key, registered as admin by an earlier version, became the operator key. */
        "api_key.role_changed": {
            keyId: string;
            from: string;
            to: string;
        };
        /** @description A tenant secret was created or replaced; its configuration, never its value. */
        "secret.set": {
            name: string;
            hosts: string[];
            header: string | null;
            /** @enum {unknown} */
            approval: "none" | "required";
            allowPlaintext?: boolean;
            allowUpgrade?: boolean;
        };
        /** @description A tenant secret was removed. */
        "secret.removed": {
            name: string;
        };
        /** @description The tenant's key provider was registered (token and key labels, never a PIN or key). */
        "key.provider_set": {
            /** @enum {unknown} */
            provider: "keyring" | "pkcs11";
            token?: string;
            key?: string;
            currentVersion: number;
            byKeyId: string;
        };
        /** @description New writes use data key version toVersion; with an HSM every older version was wrapped again. */
        "key.rotated": {
            provider: string;
            fromVersion: number;
            toVersion: number;
            key?: string;
            rewrappedVersions?: number[];
            byKeyId: string;
        };
        /** @description The tenant's wrapped data keys were destroyed; nothing of it can be read again. */
        "key.revoked": {
            provider: string;
            versions: number[];
            byKeyId: string;
        };
        /** @description A snapshot of the tenant's became a version of its template name. */
        "template.published": {
            name: string;
            version: number;
            versionId: string;
            snapshotId: string;
            buildId: string | null;
        };
        /** @description An operator key published the tenant's template for every tenant (public true), or withdrew it. */
        "template.visibility_changed": {
            name: string;
            public: boolean;
            keyId: string;
        };
        /** @description Versions of a tenant template were deleted. */
        "template.deleted": {
            name: string;
            versions: number[];
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}

/** The data each event type carries. */
export type EventDataMap = components['schemas'];
export type EventType = keyof EventDataMap;
export type EventData<T extends EventType> = EventDataMap[T];

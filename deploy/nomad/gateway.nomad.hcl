# Sandglass's gateways on Nomad: one per VM host, a system job (the control plane is control-plane.nomad.hcl).
# The layout of docs/deploy.md; the values to change are listed there ("Nomad"). deploy/deploy.test.ts parses this
# file and compares its command with tests/cluster-harness.ts. Its secrets are Nomad Variables the task reads:
#   nomad var put nomad/jobs/sandglass-gateway node_secret=<64 hex digits> aws_access_key_id=… aws_secret_access_key=…
#   nomad var put nomad/jobs/sandglass-gateway/enrol/<node name> token=$(sandglass nodes enroll <node name>)

job "sandglass-gateway" {
  # One per client node that carries the class: E2B runs its node agent the same way.
  type = "system"

  constraint {
    attribute = "${node.class}"
    value     = "sandglass-gateway"
  }

  group "gateway" {
    task "gateway" {
      # raw_exec: root on the host, its network, /dev/kvm and /dev/shm as they are (the jailer isolates each VM).
      driver = "raw_exec"

      config {
        command = "/opt/sandglass/bin/sandglass"
        args = [
          "gateway",
          "--control-plane", "https://sandglass.example",
          "--node-id", "${node.unique.name}",
          "--node-secret-file", "${NOMAD_SECRETS_DIR}/node-secret",
          "--store", "s3://sandglass-snapshots/prod",
          "--listen", "0.0.0.0:7071",
          "--internal-listen", "${attr.unique.network.ip-address}:7081",
        ]
      }

      # Node discovery from what Nomad knows: the client's name is the node id, its address the internal API's.
      # The enrolment token is read only when the operator left one for this node; later starts use the key file.
      template {
        destination = "${NOMAD_SECRETS_DIR}/env"
        env         = true
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/sandglass-gateway" }}
          AWS_ACCESS_KEY_ID={{ .aws_access_key_id }}
          AWS_SECRET_ACCESS_KEY={{ .aws_secret_access_key }}
          {{ end }}
          {{ range nomadVarList (printf "nomad/jobs/sandglass-gateway/enrol/%s" (env "node.unique.name")) }}
          {{ with nomadVar .Path }}SANDGLASS_ENROL_TOKEN={{ .token }}{{ end }}
          {{ end }}
        EOT
      }

      template {
        destination = "${NOMAD_SECRETS_DIR}/node-secret"
        perms       = "600"
        data        = "{{ with nomadVar \"nomad/jobs/sandglass-gateway\" }}{{ .node_secret }}{{ end }}"
      }

      env {
        SANDGLASS_HOME          = "/var/lib/sandglass"
        SANDGLASS_ADVERTISE_URL = "http://${attr.unique.network.ip-address}:7071"
        SANDGLASS_S3_ENDPOINT   = "https://s3.internal"
        SANDGLASS_S3_PATH_STYLE = "true"
      }

      # Stopping the task stops the VMs without ending their sandboxes: the control plane moves them.
      kill_signal  = "SIGTERM"
      kill_timeout = "60s"

      resources {
        cpu    = 2000
        memory = 1024
      }
    }
  }
}

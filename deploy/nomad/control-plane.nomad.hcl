# Sandglass's control-plane replicas on Nomad, a service job (the gateways are gateway.nomad.hcl, a system job).
# The layout of docs/deploy.md; the values to change are listed there ("Nomad"). deploy/deploy.test.ts parses this
# file and compares its command with tests/cluster-harness.ts. Its secrets are a Nomad Variable the task reads:
#   nomad var put nomad/jobs/sandglass-control-plane db_url=postgres://… node_secret=<64 hex digits> \
#     aws_access_key_id=… aws_secret_access_key=…

job "sandglass-control-plane" {
  type = "service"

  group "control-plane" {
    count = 2

    network {
      port "api" {
        static = 7070
      }
    }

    # The front (haproxy, Consul's or Nomad's service discovery) sends traffic only to replicas whose check passes.
    service {
      name     = "sandglass-control-plane"
      port     = "api"
      provider = "nomad"

      check {
        type     = "http"
        path     = "/v1/health"
        interval = "1s"
        timeout  = "1s"
      }
    }

    # The keyring every replica shares (a host volume on shared storage, as the systemd layout's /srv/sandglass-shared).
    volume "keys" {
      type   = "host"
      source = "sandglass-shared"
    }

    task "control-plane" {
      driver = "exec"
      user   = "sandglass"

      config {
        command = "/opt/sandglass/bin/sandglass"
        args = [
          "control-plane",
          "--listen", "0.0.0.0:7070",
          "--node-secret-file", "${NOMAD_SECRETS_DIR}/node-secret",
          "--keys-dir", "/srv/sandglass-shared/keys",
          "--admin-key-file", "/srv/sandglass-shared/admin-key",
          "--dead-after-s", "30",
          "--heartbeat-interval-s", "2",
          "--store", "s3://sandglass-snapshots/prod",
        ]
      }

      volume_mount {
        volume      = "keys"
        destination = "/srv/sandglass-shared"
      }

      # The database URL and the store's credentials reach the process as its environment, never its command line.
      template {
        destination = "${NOMAD_SECRETS_DIR}/env"
        env         = true
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/sandglass-control-plane" }}
          SANDGLASS_DB={{ .db_url }}
          AWS_ACCESS_KEY_ID={{ .aws_access_key_id }}
          AWS_SECRET_ACCESS_KEY={{ .aws_secret_access_key }}
          {{ end }}
        EOT
      }

      template {
        destination = "${NOMAD_SECRETS_DIR}/node-secret"
        perms       = "600"
        data        = "{{ with nomadVar \"nomad/jobs/sandglass-control-plane\" }}{{ .node_secret }}{{ end }}"
      }

      env {
        SANDGLASS_S3_ENDPOINT  = "https://s3.internal"
        SANDGLASS_S3_PATH_STYLE = "true"
      }

      resources {
        cpu    = 1000
        memory = 512
      }
    }
  }
}

// Package deploy holds the files of the docker-compose stack (MySQL init SQL, the outboxd and
// RocketMQ broker configs), of the Kubernetes manifests (deploy/kubernetes), of the Helm chart
// (deploy/helm/outboxd) and of the systemd unit (deploy/systemd), and, in its tests, checks them
// without a Docker engine or a cluster: compose-go loads and validates the stack, the manifests
// and the chart's rendering (Helm's own Go packages lint and render it) are decoded strictly into
// the k8s.io/api types, outboxd's own config loader parses the configs they mount,
// systemd-analyze verifies the unit, and the unit is installed as docs/operations/systemd.md says
// and started as an unprivileged user against MariaDB and kfake.
package deploy

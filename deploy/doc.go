// Package deploy holds the files of the docker-compose stack (MySQL init SQL, the outboxd and
// RocketMQ broker configs), of the Kubernetes manifests (deploy/kubernetes) and of the systemd
// unit (deploy/systemd), and, in its tests, checks docker-compose.yml, the Dockerfile, the
// manifests and the unit without a Docker engine, a cluster or systemd: compose-go loads and
// validates the stack, the manifests are decoded strictly into the k8s.io/api types, and
// outboxd's own config loader parses the configs both mount.
package deploy

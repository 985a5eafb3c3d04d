// Package deploy holds the files of the docker-compose stack (MySQL init SQL, the outboxd and
// RocketMQ broker configs) and, in its tests, checks docker-compose.yml and the Dockerfile
// without a Docker engine: compose-go loads and validates the stack, and outboxd's own config
// loader parses the config the stack mounts.
package deploy

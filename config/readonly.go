package config

import (
	"fmt"
	"os"
	"strings"
)

// secretPlaceholder stands for a secret LoadWithoutSecrets did not load.
const secretPlaceholder = "(not loaded)"

// LoadWithoutSecrets is Load for commands that never connect to the source or a sink
// (checkpoint show, status): the secrets (source.password, sinks' access_key, secret_key and
// sasl.password, and the tls key of the source and of each sink, each given directly, from
// ${VAR} or from a *_file) are not read, so an unset variable or an unreadable secret file is
// no error, and each such field holds a placeholder. CA files, client certificates and
// OAUTHBEARER token files are not read either. Every other field is loaded and validated as by Load. The
// result must not be used to connect anywhere. It blocks on reading path only.
func LoadWithoutSecrets(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := parseWith(data, os.LookupEnv, readLimitedFile, true)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// isSecretField reports whether the field path holds a secret.
func isSecretField(path string) bool {
	if path == "source.password" || path == "source.tls.key" {
		return true
	}
	if !strings.HasPrefix(path, "sinks.") {
		return false
	}
	for _, s := range []string{".access_key", ".secret_key", ".sasl.password", ".tls.key"} {
		if strings.HasSuffix(path, s) && strings.Count(path, ".") == strings.Count(s, ".")+1 {
			return true
		}
	}
	return false
}

// readNoSecretFile is resolveFiles' readFile for LoadWithoutSecrets: no secret file is read,
// each yields the placeholder (CA files are skipped by resolveFiles itself).
func readNoSecretFile(string) ([]byte, error) { return []byte(secretPlaceholder), nil }

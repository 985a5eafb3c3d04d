// Package deps pins modules during bootstrap; removed once real code imports them.
package deps

import (
	_ "github.com/go-mysql-org/go-mysql/client"
	_ "github.com/go-mysql-org/go-mysql/replication"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/gofrs/flock"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rs/zerolog"
	_ "github.com/segmentio/kafka-go"
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/sync/errgroup"
)
